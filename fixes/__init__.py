"""Fixes a program adopts in a few lines (docs/fixes.md): the output side (OutputPipeline), the input side
(prefetch) and per-step reads of GPU values (GpuScalars). Each is what a finding of the analysis asks for.

The names load on first use (PEP 562), so importing the errors alone does not import torch."""
import importlib

_WHERE = {"OutputPipeline": "pipeline", "prefetch": "prefetch", "GpuScalars": "scalars",
          **{name: "errors" for name in ("HostBufferError", "LayoutError", "NoGpu", "PipelineError",
                                         "ProcessFailed", "TerminatedBySignal", "WorkerDied")}}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
