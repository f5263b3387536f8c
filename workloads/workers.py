"""Output worker processes and the queues between them and the main loop.

Unlike the article's JoinableQueue.join(), every hand-over and every wait here checks the workers' liveness, so
a worker that dies (even one of several, while the others keep up) ends the run within a step with a message
instead of hanging it or finishing short-handed; and every worker dies with the main process (lifetime.py).
"""
from __future__ import annotations

import os
import queue
import signal
import time

import torch.multiprocessing as mp

from nsys_transfer.nsys_core.contracts import PROCESS_OUTPUT

from nsys_transfer.workloads.integrity import MASK64
from nsys_transfer.workloads.lifetime import die_with_parent
from nsys_transfer.workloads.postprocess import Sink, apply_fault
from nsys_transfer.workloads.ranges import nvtx_range

POLL_S = 0.5


class WorkerDied(RuntimeError):
    """An output worker exited while the pipeline still needed it."""


def slice_bounds(nbytes: int, k: int, n: int) -> tuple[int, int]:
    """Byte range of slice k of n: 8-byte aligned, so slice checksums add up to the batch checksum."""
    size = -(-nbytes // n // 8) * 8 if n > 1 else nbytes
    return min(k * size, nbytes), min((k + 1) * size, nbytes)


def _worker_main(index, parent_pid, in_q, free_q, result_q, buffers, remaining, sink_spec, chunk_bytes, fault):
    die_with_parent(parent_pid, f"output-worker-{index}")
    sink = None
    try:
        sink = Sink(sink_spec)
        while True:
            item = in_q.get()
            if item is None:
                break
            batch_id, payload, k, n = item
            tensor = buffers[payload] if isinstance(payload, int) else payload
            array = tensor.numpy()
            if n > 1:  # this worker serialises one slice of the batch
                lo, hi = slice_bounds(array.nbytes, k, n)
                array = array.reshape(-1).view("u1")[lo:hi]
            if k == 0:
                apply_fault(fault, batch_id, array)
            with nvtx_range(PROCESS_OUTPUT):
                cs = sink.write_batch(batch_id, array, chunk_bytes)
            result_q.put((batch_id, cs, k))
            del tensor, array
            if isinstance(payload, int):
                if n > 1:
                    with remaining.get_lock():
                        remaining[payload] -= 1
                        last = remaining[payload] == 0
                else:
                    last = True
                if last:
                    free_q.put(payload)  # recycle the buffer once every slice is written
    except KeyboardInterrupt:
        pass
    except Exception as e:  # told to the main process in one line (a traceback here would interleave with its output)
        result_q.put((None, f"output worker {index} (pid {os.getpid()}) failed: {type(e).__name__}: {e}", index))
        result_q.close()
        result_q.join_thread()
        os._exit(1)
    finally:
        if sink is not None:
            sink.close()


class OutputWorkers:
    """A pool of post-processing processes.

    put((batch id, buffer index)) when `buffers` is given, else put((batch id, CPU tensor)).
    With split > 1 each buffered batch is cut into `split` slices that different workers serialise at once
    (lower latency per batch); the buffer comes back on `free_q` when its last slice is done, and the
    slice checksums are summed into the batch's.
    """

    def __init__(self, n: int, buffers: list | None, sink_spec: str, chunk_bytes: int, fault: str = "",
                 in_maxsize: int = 0, split: int = 1):
        ctx = mp.get_context("fork")
        self.in_q = ctx.Queue(maxsize=in_maxsize)
        self.free_q = ctx.Queue()
        self.result_q = ctx.Queue()
        self.results: list[tuple[int, int]] = []
        self.buffers = buffers or []
        self.split = split if self.buffers else 1
        self._partial: dict[int, tuple[int, int]] = {}  # batch id -> (checksum so far, slices seen)
        self.remaining = ctx.Array("i", max(1, len(self.buffers)))
        for i in range(len(self.buffers)):
            self.free_q.put(i)
        self.procs = [ctx.Process(target=_worker_main, daemon=True, name=f"output-worker-{i}",
                                  args=(i, os.getpid(), self.in_q, self.free_q, self.result_q, buffers, self.remaining,
                                        sink_spec, chunk_bytes, fault))
                      for i in range(n)]
        for p in self.procs:
            p.start()
        self.closed = False

    def check_alive(self):
        """WorkerDied naming the first worker that is gone (cheap: a waitpid per worker, no blocking)."""
        for i, p in enumerate(self.procs):
            if not p.is_alive():
                self._collect()  # a worker that failed said why on the result queue: that becomes the message
                raise WorkerDied(f"output worker {i} (pid {p.pid}) {_how_it_ended(p.exitcode)} while batches were "
                                 "pending; stopping the run")

    def _add(self, batch_id: int | None, cs):
        if batch_id is None:  # a worker's last words (see _worker_main)
            raise WorkerDied(f"{cs}; stopping the run")
        if self.split == 1:
            self.results.append((batch_id, cs))
            return
        total, count = self._partial.get(batch_id, (0, 0))
        total, count = (total + cs) & MASK64, count + 1
        if count == self.split:
            self._partial.pop(batch_id, None)
            self.results.append((batch_id, total))
        else:
            self._partial[batch_id] = (total, count)

    def _collect(self):
        while True:
            try:
                batch_id, cs, _ = self.result_q.get_nowait()
            except queue.Empty:
                return
            self._add(batch_id, cs)

    def put(self, item):
        """Queue (batch id, buffer index or tensor) for the workers, in `split` slices."""
        self.check_alive()  # every batch: a worker that died while the others keep up must not go unnoticed
        batch_id, payload = item
        if self.split > 1:
            self.remaining[payload] = self.split
        for k in range(self.split):
            self._put((batch_id, payload, k, self.split))

    def _put(self, item):
        while True:
            try:
                self.in_q.put(item, timeout=POLL_S)
                return
            except queue.Full:
                self.check_alive()

    def get_free(self) -> int:
        """The index of a free buffer, waiting for one; WorkerDied if a worker is gone."""
        self.check_alive()
        while True:
            try:
                return self.free_q.get(timeout=POLL_S)
            except queue.Empty:
                self.check_alive()

    def wait_results(self, n_total: int, timeout_s: float = 600.0):
        """Block until n_total batches have been processed (the article's queue.join(), but fail-fast)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._collect()
            if len(self.results) >= n_total:
                return
            self.check_alive()
            try:
                batch_id, cs, _ = self.result_q.get(timeout=POLL_S)
                self._add(batch_id, cs)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise WorkerDied(f"output workers processed {len(self.results)} of {n_total} batches "
                                     f"in {timeout_s:.0f} s; they are stuck")

    def close(self):
        """Stop the workers: let them finish when all are alive, else terminate them."""
        if self.closed:
            return
        self.closed = True
        # all alive: the normal end, let them finish; one dead: the others may be stuck on a lock it held, stop now
        graceful = all(p.is_alive() for p in self.procs)
        for p in self.procs if graceful else []:
            try:
                self.in_q.put(None, timeout=1)
            except queue.Full:
                break
        deadline = time.monotonic() + (5 if graceful else 0)
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                os.kill(p.pid, 9)
        try:
            self._collect()
        except WorkerDied:
            pass  # the run is over; what a worker said then no longer changes it
        for q in (self.in_q, self.free_q, self.result_q):
            q.cancel_join_thread()
            q.close()


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}" + ("; its last lines are above" if exitcode not in (0, 1) else "")
