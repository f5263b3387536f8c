"""What every stage shares: config, the output sink, and the in-process result list."""
from __future__ import annotations

from ...nsys_core.contracts import PROCESS_OUTPUT

from ...fixes.checksums import compare
from ...fixes.ranges import nvtx_range
from ..postprocess import Sink, apply_fault
from ..data import Prefetcher, SyncBatches


class InProcessStage:
    """Post-processes on the main thread (naive-input, baseline)."""

    naive_input = False   # part 1's "before": no loader workers, no pinning, no prefetch
    copies_output = True  # False only for the compute ceiling
    default_chunk_mb = 0  # the article serialises the whole batch with one tobytes()
    default_split = 1     # the article gives each batch to one worker

    def __init__(self, cfg, device):
        self.cfg, self.device = cfg, device
        mb = cfg.chunk_mb if cfg.chunk_mb >= 0 else self.default_chunk_mb
        self.chunk_bytes = mb << 20
        split = cfg.split if cfg.split >= 1 else self.default_split
        # .npy output keeps one file per batch, so one worker writes it
        self.split = 1 if cfg.postprocess.startswith("npy:") else min(split, max(1, cfg.output_workers))
        self._results: list[tuple[int, int]] = []
        self.handed = 0

    def batches(self, loader, device):
        """The loader's batches on the device: part 1's prefetcher, or plain copies for the naive stage and the CPU."""
        if self.naive_input or device.type == "cpu":
            return SyncBatches(loader, device)
        return Prefetcher(loader, device)

    def integrity(self, expected: dict):
        """The workers' checksums against the ones taken on the GPU (expected: batch id -> checksum)."""
        return compare(expected, list(self.results()))

    def setup(self, shape, dtype):
        """Open the output sink (shape and dtype are for stages that pre-allocate buffers)."""
        self.sink = Sink(self.cfg.postprocess)

    def process_here(self, batch_id, cpu_tensor):
        """Post-process one batch's CPU output on this thread."""
        array = cpu_tensor.numpy()
        apply_fault(self.cfg.fault, batch_id, array)
        with nvtx_range(PROCESS_OUTPUT):
            self._results.append((batch_id, self.sink.write_batch(batch_id, array, self.chunk_bytes)))

    def drain(self):
        """Nothing to wait for: every batch was processed in the loop."""
        pass

    def results(self):
        """(batch id, checksum) of every processed batch."""
        return self._results

    def close(self):
        """Close the output sink."""
        if getattr(self, "sink", None):
            self.sink.close()


class WorkerStage(InProcessStage):
    """Post-processes in output worker processes (multiproc and later)."""

    workers = None

    def drain(self):
        """Wait until the workers have processed every batch handed to them."""
        self.workers.wait_results(self.handed)

    def results(self):
        """(batch id, checksum) of every batch the workers processed."""
        return self.workers.results if self.workers else []

    def close(self):
        """Stop the output workers."""
        if self.workers:
            self.workers.close()
