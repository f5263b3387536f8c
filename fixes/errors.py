"""The fixes' one family of errors: every failure of a pipeline is a PipelineError naming what failed."""
from __future__ import annotations

import traceback


class PipelineError(RuntimeError):
    """An output pipeline could not deliver every batch; the message names what failed."""


class WorkerDied(PipelineError):
    """A worker exited (killed, crashed) while batches were still pending."""


class ProcessFailed(PipelineError):
    """The user's process() raised on a batch; the message has the batch, the worker, the error and where."""


class HostBufferError(PipelineError):
    """The host buffers cannot be made: no room in /dev/shm or host memory, or pinning was refused."""


class LayoutError(PipelineError, ValueError):
    """A batch's outputs do not fit the buffers sized from the first batch (other structure, dtype, or larger)."""


class NoGpu(PipelineError, ValueError):
    """A CUDA device was asked for where torch sees no GPU; the message says so in one line and what to pass."""


def no_gpu(who: str, device, available: bool) -> NoGpu | None:
    """The error for `who` asked to use CUDA `device` where torch sees no GPU (available: torch.cuda.is_available());
    None when the device is not CUDA or a GPU is there. Raised `from None`: torch's driver traceback says less."""
    if str(device).split(":")[0] != "cuda" or available:
        return None
    return NoGpu(f"{who}(device={str(device)!r}): torch sees no CUDA GPU on this machine "
                 "(torch.cuda.is_available() is False); pass device='cpu' to run on the CPU, or run on a GPU machine")


class TerminatedBySignal(SystemExit):
    """SIGTERM arrived: the pipeline stopped its workers and freed its buffers; the process exits with 128 + signal,
    as SIGTERM's default action would, without a traceback."""


def describe(e: BaseException) -> str:
    """'TypeName: message (at file.py:line)': an exception in one line, with the innermost frame that raised it."""
    where = ""
    frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ else []
    if frames:
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})"
    return f"{type(e).__name__}: {e}{where}"
