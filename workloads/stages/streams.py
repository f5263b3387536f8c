"""Stage 5 ("streams"): the DtoH copy on its own CUDA stream, so copies overlap the next batch's compute.

As published: no record_stream() on the output, so the caching allocator may hand its memory to the
next batch while the copy stream still reads it; and the buffers are still Pageable (see async_copy).
"""
import torch

from .async_copy import Stage as Async


class Stage(Async):
    """Stage 5 (streams): the DtoH copy on its own CUDA stream, overlapping the next batch's compute."""
    def setup(self, shape, dtype):
        """The async stage's buffers and monitor, plus the copy stream."""
        super().setup(shape, dtype)
        self.copy_stream = torch.cuda.Stream()

    def copy_out(self, buf, output):
        """Copy on the copy stream once the compute stream's work is done, and record the event there."""
        self.copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy_stream):
            self.buffers[buf].copy_(output, non_blocking=True)
            self.events[buf].record()
