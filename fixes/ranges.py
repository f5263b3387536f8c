"""NVTX ranges with the article's names: through the nvtx package, else torch's own NVTX bindings when torch has CUDA,
else nothing (the ranges only label phases in a trace)."""
from __future__ import annotations

import contextlib
import functools

from ..nsys_core.contracts import COMPUTE, COPY_TO_CPU, GET_BATCH, PROCESS_OUTPUT, QUEUE_OUTPUT

try:  # nsys 2023.4 records nvtx <= 0.2.11 only (see profiling/checks.py)
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - exercised only without the package
    _nvtx = None


@contextlib.contextmanager
def _torch_range(name: str):
    import torch  # noqa: PLC0415
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


def _torch_has_nvtx() -> bool:
    try:
        import torch  # noqa: PLC0415
        return torch.version.cuda is not None and torch.cuda.is_available()
    except Exception:  # no torch, or a broken CUDA set-up: no ranges
        return False

_TORCH_NVTX = functools.lru_cache(maxsize=1)(_torch_has_nvtx)
GREY = 0x808080
COLORS = {GET_BATCH: "green", COMPUTE: "blue", COPY_TO_CPU: "red", PROCESS_OUTPUT: "yellow", QUEUE_OUTPUT: "orange"}


def nvtx_range(name: str):
    """An NVTX range around a block (coloured by phase), or nothing without the nvtx package."""
    if _nvtx is None:
        return _torch_range(name) if _TORCH_NVTX() else contextlib.nullcontext()
    # a colour of nvtx's own table or an int: any other name makes nvtx import matplotlib (0.3 s, seen on the first
    # drain of a pipeline: on the loop's critical path)
    color = "purple" if name.startswith("Batch") else COLORS.get(name, GREY)
    return _nvtx.annotate(name, color=color)
