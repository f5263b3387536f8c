"""The compute ceiling: the whole input pipeline and forward pass, with no output copy at all."""
from .base import InProcessStage


class Stage(InProcessStage):
    """The compute ceiling: the output never leaves the GPU."""
    copies_output = False

    def handle(self, batch_id, output):
        """Count the batch; no copy."""
        self.handed += 1
