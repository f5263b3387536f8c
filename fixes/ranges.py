"""NVTX ranges with the article's names; a no-op when the nvtx package is absent."""
from __future__ import annotations

import contextlib

from nsys_transfer.nsys_core.contracts import COMPUTE, COPY_TO_CPU, GET_BATCH, PROCESS_OUTPUT, QUEUE_OUTPUT

try:  # nsys 2023.4 records nvtx <= 0.2.11 only (see profiling/checks.py)
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - exercised only without the package
    _nvtx = None

COLORS = {GET_BATCH: "green", COMPUTE: "blue", COPY_TO_CPU: "red", PROCESS_OUTPUT: "yellow", QUEUE_OUTPUT: "orange"}


def nvtx_range(name: str):
    """An NVTX range around a block (coloured by phase), or nothing without the nvtx package."""
    if _nvtx is None:
        return contextlib.nullcontext()
    color = "purple" if name.startswith("Batch") else COLORS.get(name, "grey")
    return _nvtx.annotate(name, color=color)
