"""NVTX ranges with the article's names; a no-op when the nvtx package is absent."""
from __future__ import annotations

import contextlib

try:  # nsys 2023.4 records nvtx <= 0.2.11 only (see profiling/checks.py)
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - exercised only without the package
    _nvtx = None

COLORS = {"get batch": "green", "compute": "blue", "copy to CPU": "red",
          "process output": "yellow", "queue output": "orange"}


def nvtx_range(name: str):
    if _nvtx is None:
        return contextlib.nullcontext()
    color = "purple" if name.startswith("Batch") else COLORS.get(name, "grey")
    return _nvtx.annotate(name, color=color)
