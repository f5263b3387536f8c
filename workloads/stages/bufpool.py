"""Stage 3: a pool of pre-allocated shared-memory output buffers, recycled through a second queue."""
import torch

from ...nsys_core.contracts import COPY_TO_CPU, QUEUE_OUTPUT

from ...fixes.ranges import nvtx_range
from ..workers import OutputWorkers
from .base import WorkerStage


class Stage(WorkerStage):
    """Stage 3 (bufpool): pre-allocated shared-memory buffers, recycled through the workers."""
    def make_buffers(self, shape, dtype):
        """The output buffers, allocated once in shared memory."""
        return [torch.empty(shape, dtype=dtype).share_memory_() for _ in range(self.cfg.n_buffers)]

    def setup(self, shape, dtype):
        """The buffers and the output workers that recycle them."""
        self.buffers = self.make_buffers(shape, dtype)
        self.workers = OutputWorkers(self.cfg.output_workers, self.buffers, self.cfg.postprocess,
                                     self.chunk_bytes, self.cfg.fault, split=self.split)

    def handle(self, batch_id, output):
        """Copy one batch's output into a free buffer and queue the buffer's index."""
        with nvtx_range(COPY_TO_CPU):
            buf = self.workers.get_free()
            self.buffers[buf].copy_(output)
        with nvtx_range(QUEUE_OUTPUT):
            self.workers.put((batch_id, buf))
        self.handed += 1
