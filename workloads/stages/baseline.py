"""Stage 1 (the article's baseline): copy the output to the CPU and post-process it in the loop."""
from ...nsys_core.contracts import COPY_TO_CPU

from ...fixes.ranges import nvtx_range
from .base import InProcessStage


class Stage(InProcessStage):
    """Stage 1 (baseline): a blocking copy into a fresh pageable tensor, post-processed in the loop."""
    def handle(self, batch_id, output):
        """Copy one batch's output to the CPU and post-process it here."""
        with nvtx_range(COPY_TO_CPU):
            cpu = output.cpu()  # synchronous DtoH into a fresh pageable tensor
        self.process_here(batch_id, cpu)
        self.handed += 1
