"""The article stages' output workers: each batch serialised by a Sink (postprocess.py) in a worker process, on the
fixes' worker pool (liveness checked at every hand-over, workers dying with the main process)."""
from __future__ import annotations

from ..nsys_core.contracts import PROCESS_OUTPUT

from ..fixes.errors import PipelineError, WorkerDied
from ..fixes.checksums import MASK64
from ..fixes.ranges import nvtx_range
from ..fixes.workers import WorkerPool
from .postprocess import Sink, apply_fault

__all__ = ["OutputWorkers", "PipelineError", "WorkerDied", "slice_bounds"]


def slice_bounds(nbytes: int, k: int, n: int) -> tuple[int, int]:
    """Byte range of slice k of n: 8-byte aligned, so slice checksums add up to the batch checksum."""
    size = -(-nbytes // n // 8) * 8 if n > 1 else nbytes
    return min(k * size, nbytes), min((k + 1) * size, nbytes)


class SinkWriter:
    """Runs in a worker: one slice of a batch (a buffer index or a CPU tensor) through the Sink; its checksum."""

    def __init__(self, buffers: list, sink_spec: str, chunk_bytes: int, fault: str):
        self.buffers, self.sink_spec, self.chunk_bytes, self.fault = buffers, sink_spec, chunk_bytes, fault
        self.sink = None  # opened in the worker, once

    def __call__(self, batch_id: int, payload, k: int, n: int, extra) -> int:
        if self.sink is None:
            self.sink = Sink(self.sink_spec)
        array = (self.buffers[payload] if isinstance(payload, int) else payload).numpy()
        if n > 1:  # this worker serialises one slice of the batch
            lo, hi = slice_bounds(array.nbytes, k, n)
            array = array.reshape(-1).view("u1")[lo:hi]
        if k == 0:
            apply_fault(self.fault, batch_id, array)
        with nvtx_range(PROCESS_OUTPUT):
            return self.sink.write_batch(batch_id, array, self.chunk_bytes)


class OutputWorkers:
    """A pool of post-processing processes.

    put((batch id, buffer index)) when `buffers` is given, else put((batch id, CPU tensor)).
    With split > 1 each buffered batch is cut into `split` slices that different workers serialise at once
    (lower latency per batch); the buffer comes back on get_free() when its last slice is done, and the
    slice checksums are summed into the batch's.
    """

    def __init__(self, n: int, buffers: list | None, sink_spec: str, chunk_bytes: int, fault: str = "",
                 in_maxsize: int = 0, split: int = 1):
        self.buffers = buffers or []
        self.split = split if self.buffers else 1
        self.pool = WorkerPool(SinkWriter(self.buffers, sink_spec, chunk_bytes, fault), n, len(self.buffers),
                               name="output-worker", in_maxsize=in_maxsize)

    @property
    def results(self) -> list[tuple[int, int]]:
        """(batch id, checksum) of every batch whose slices were all serialised."""
        return [(b, sum(parts) & MASK64) for b, parts in self.pool.completed]

    def check_alive(self):
        """WorkerDied naming the first worker that is gone."""
        self.pool.check_alive()

    def put(self, item):
        """Queue (batch id, buffer index or tensor) for the workers, in `split` slices."""
        batch_id, payload = item
        self.pool.put(batch_id, payload, self.split)

    def get_free(self) -> int:
        """The index of a free buffer, waiting for one; WorkerDied if a worker is gone."""
        return self.pool.get_free()

    def wait_results(self, n_total: int, timeout_s: float = 600.0):
        """Block until n_total batches have been processed (the article's queue.join(), but fail-fast)."""
        self.pool.wait(n_total, timeout_s)

    def close(self):
        """Stop the workers: let them finish when all are alive, else terminate them."""
        self.pool.close()
