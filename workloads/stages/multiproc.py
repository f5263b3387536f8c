"""Stage 2: post-process in worker processes fed through a torch.multiprocessing queue.

Each put moves the fresh CPU tensor into shared memory (a 1.4 GB copy), which the trace shows.
"""
from nsys_transfer.nsys_core.contracts import COPY_TO_CPU, QUEUE_OUTPUT

from nsys_transfer.workloads.ranges import nvtx_range
from nsys_transfer.workloads.workers import OutputWorkers
from nsys_transfer.workloads.stages.base import WorkerStage


class Stage(WorkerStage):
    def setup(self, shape, dtype):
        self.workers = OutputWorkers(self.cfg.output_workers, None, self.cfg.postprocess, self.chunk_bytes,
                                     self.cfg.fault, in_maxsize=self.cfg.output_workers)

    def handle(self, batch_id, output):
        with nvtx_range(COPY_TO_CPU):
            cpu = output.cpu()
        with nvtx_range(QUEUE_OUTPUT):
            self.workers.put((batch_id, cpu))
        self.handed += 1
