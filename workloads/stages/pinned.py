"""Beyond the article: the `streams` stage's loop on the fixes library (nsys_transfer.fixes), which reaches the
compute ceiling.

1. prefetch(): the next batches copied on a side stream, the compute stream waiting on an event per batch.
2. OutputPipeline: shared buffers pinned in place (cudaHostRegister; pin_memory=True + share_memory_() silently
   un-pins), the copy on its own stream with record_stream, an event per buffer, a monitor thread.
3. Post-processing in 8 MB chunks (same tobytes()+write of every byte): no fresh 1.4 GB allocation, page-faulted and
   zeroed, per batch in every worker.
4. Each batch split across the output workers (split=8, one slice of rows each): a batch is done in ~1/8 of the
   time, so the pipeline drains faster and buffers come back sooner.
"""
import sys

import torch

from ...fixes import OutputPipeline, prefetch
from ..postprocess import Sink, apply_fault
from .base import InProcessStage


class Serialise:
    """process() for the pipeline: the rows a worker got through the Sink (opened once per worker)."""

    def __init__(self, sink_spec: str, chunk_bytes: int, fault: str):
        self.sink_spec, self.chunk_bytes, self.fault, self.sink = sink_spec, chunk_bytes, fault, None

    def __call__(self, batch_id, tensor, rows=range(0)):
        """Write the rows of batch `batch_id` to the Sink (the fault, if any, applied with its first rows)."""
        if self.sink is None:
            self.sink = Sink(self.sink_spec)
        # NumPy has no bfloat16: its bytes are serialised as they are
        array = tensor.reshape(-1).view(torch.uint8).numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()
        if rows.start == 0:
            apply_fault(self.fault, batch_id, array)
        self.sink.write_batch(batch_id, array, self.chunk_bytes)


class Stage(InProcessStage):
    """Beyond the article: prefetch() and OutputPipeline, the fixes a user adopts."""
    default_chunk_mb = 8
    default_split = 8

    def batches(self, loader, device):
        """The loader's batches on the GPU, prefetched on a side stream."""
        return prefetch(loader, device)

    def setup(self, shape, dtype):
        """The pipeline, its buffers and workers made now (before the loader forks its own)."""
        self.pipeline = OutputPipeline(Serialise(self.cfg.postprocess, self.chunk_bytes, self.cfg.fault),
                                       workers=self.cfg.output_workers, buffers=self.cfg.n_buffers, split=self.split,
                                       verify=True, tensors=True, like=torch.empty(shape, dtype=dtype, device="meta"),
                                       device=self.device).__enter__()
        self.pipeline._copier.unsafe = self.cfg.unsafe  # --unsafe: hand buffers over before their copy landed

    def handle(self, batch_id, output):
        """Hand one batch's output to the pipeline (returns once the copy is queued)."""
        self.pipeline.submit(batch_id, output)
        self.handed += 1

    def drain(self):
        """Wait until the workers have processed every batch handed over."""
        self.pipeline.flush()

    def integrity(self, expected):
        """The pipeline's own check: each batch's checksum on the GPU against the bytes its workers received."""
        return self.pipeline.report()

    def results(self):
        """(batch id, checksum) of every batch the workers processed."""
        return self.pipeline.received()

    def close(self):
        """Stop the pipeline: an orderly close at the end, an abort while an error or a stop unwinds the run."""
        if getattr(self, "pipeline", None) is not None:
            self.pipeline.__exit__(*sys.exc_info())
