"""Stage 2: post-process in worker processes fed through a torch.multiprocessing queue.

Each put moves the fresh CPU tensor into shared memory (a 1.4 GB copy), which the trace shows.
"""
from ...nsys_core.contracts import COPY_TO_CPU, QUEUE_OUTPUT

from ...fixes.ranges import nvtx_range
from ..workers import OutputWorkers
from .base import WorkerStage


class Stage(WorkerStage):
    """Stage 2 (multiproc): post-processing in worker processes, each output sent through a queue."""
    def setup(self, shape, dtype):
        """The output workers (no pre-allocated buffers)."""
        self.workers = OutputWorkers(self.cfg.output_workers, None, self.cfg.postprocess, self.chunk_bytes,
                                     self.cfg.fault, in_maxsize=self.cfg.output_workers)

    def handle(self, batch_id, output):
        """Copy one batch's output to the CPU and queue the tensor for the workers."""
        with nvtx_range(COPY_TO_CPU):
            cpu = output.cpu()
        with nvtx_range(QUEUE_OUTPUT):
            self.workers.put((batch_id, cpu))
        self.handed += 1
