"""Where a trace's GPU time went, as parts that add up to the GPUs' time in the window: kernels, copies outside
kernels by direction and host memory, and the idle time by its one cause (analysis/sections/idle.py). From the
document alone, so a chart of it and the figures beside it cannot disagree."""
from __future__ import annotations

from ..sections.breakdown import DIRECTIONS, cause_label, main_kind
from .document import Document


def time_breakdown(doc: Document) -> list[tuple[str, float]]:
    """(label, ns) parts of the GPUs' time in the window, largest idle causes named, the rest 'idle: other'."""
    gpu = doc.gpu
    devices = gpu.devices if gpu else ()
    total = sum(d.window_ns or 0 for d in devices) or (doc.window.duration_ns or 0)
    if not total:
        return []
    busy, compute = (gpu.busy_ns or 0, gpu.compute_ns or 0) if gpu else (0, 0)
    parts = [("kernels", float(compute))]
    copies = {k: d for k, d in (("dtoh", doc.memcpy.dtoh), ("htod", doc.memcpy.htod), ("dtod", doc.memcpy.dtod))
              if d.total_ns}
    copy_ns = sum(d.total_ns for d in copies.values())
    outside = max(busy - compute, 0)  # copy time not under kernels, shared out by each direction's copy time
    for k, d in copies.items():
        parts.append((f"{DIRECTIONS[k]} ({main_kind(d) or '?'})", outside * d.total_ns / copy_ns))
    idle: dict[str, float] = {}
    for c in doc.idle.causes if doc.idle else ():
        label = cause_label(c.cause, c.subject)
        idle[label] = idle.get(label, 0.0) + c.idle_ns
    parts += sorted(idle.items(), key=lambda x: -x[1])
    rest = total - sum(ns for _, ns in parts)
    if rest > 0.001 * total:
        parts.append(("idle: other", rest))
    return [(label, ns) for label, ns in parts if ns > 0]

