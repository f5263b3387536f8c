"""Stage 4 ("async"): pinned buffers, non-blocking copies, a CUDA event per buffer, and a monitor thread
that hands a buffer to the workers once its event fires.

As published, the buffers are allocated with pin_memory=True and then share_memory_()'d, which moves
them to a new shared mapping and drops the pinning: the copies are Pageable in the trace.
"""
import queue
import threading

import torch

from ...nsys_core.contracts import COPY_TO_CPU, QUEUE_OUTPUT

from ...fixes.ranges import nvtx_range
from .bufpool import Stage as BufPool


class Stage(BufPool):
    """Stage 4 (async): non-blocking copies into pinned buffers, handed on when their event fires."""
    def make_buffers(self, shape, dtype):
        """Pinned output buffers, moved into shared memory (which unpins them: see stage pinned)."""
        return [torch.empty(shape, dtype=dtype, pin_memory=True).share_memory_() for _ in range(self.cfg.n_buffers)]

    def setup(self, shape, dtype):
        """The buffers, one CUDA event each, and the monitor thread that waits on them."""
        super().setup(shape, dtype)
        self.events = [torch.cuda.Event() for _ in self.buffers]
        self.pending = queue.Queue()
        self.monitor_error = None
        self.monitor = threading.Thread(target=self._monitor, name="copy-monitor", daemon=True)
        self.monitor.start()

    def _monitor(self):
        try:
            while (item := self.pending.get()) is not None:
                batch_id, buf = item
                if not self.cfg.unsafe:  # --unsafe: hand over before the copy finished (the checker must catch it)
                    self.events[buf].synchronize()
                self.workers.put((batch_id, buf))
        except BaseException as e:  # surfaced by drain()
            self.monitor_error = e

    def copy_out(self, buf, output):
        """Copy the output into buffer buf without waiting, and record its event."""
        self.buffers[buf].copy_(output, non_blocking=True)
        self.events[buf].record()

    def handle(self, batch_id, output):
        """Copy one batch's output into a free buffer and queue it for the monitor."""
        with nvtx_range(COPY_TO_CPU):
            buf = self.workers.get_free()
            self.copy_out(buf, output)
        with nvtx_range(QUEUE_OUTPUT):
            self.pending.put((batch_id, buf))
        self.handed += 1

    def drain(self):
        """Wait for the workers; a failure of the monitor thread is raised here."""
        if self.monitor_error:
            raise self.monitor_error
        super().drain()

    def close(self):
        """Stop the monitor thread, then the workers."""
        if getattr(self, "monitor", None) and self.monitor.is_alive():
            self.pending.put(None)
            self.monitor.join(timeout=5)
        super().close()
