"""Where a trace's GPU time went, as parts that add up to the GPUs' time in the window: kernels, copies outside
kernels by direction and host memory, and the idle time by its one cause (analysis/sections/idle.py). From the summary
alone, so a chart of it and the figures beside it cannot disagree."""
from __future__ import annotations

from ..common import idle_causes
from .copies import CopyDirection

DIRECTIONS = {"dtoh": "DtoH", "htod": "HtoD", "dtod": "DtoD"}


def cause_label(cause: str, subject: str | None) -> str:
    """The chart label of an idle cause (common/idle_causes.py), or for idle time inside a user range, the range."""
    declared = idle_causes.by_name(cause)
    return (declared.label if declared else None) or (f"idle: in '{subject}'" if subject else "idle: CPU work")


def _kind_counts(d: CopyDirection | dict) -> tuple[dict, dict]:
    """A direction's bytes and copies by host memory kind, typed or as its JSON (time_breakdown reads the JSON)."""
    if isinstance(d, dict):
        return d.get("kind_bytes") or {}, d.get("kinds") or {}
    return d.kind_bytes, d.kinds


def main_kind(d: CopyDirection | dict) -> str | None:
    """The host memory kind most of a direction's bytes went to or came from (a summary's memcpy.dtoh etc.; by count
    in a summary older than kind_bytes); None without copies."""
    kind_bytes, counts = _kind_counts(d)
    kinds = kind_bytes or counts
    return max(kinds, key=kinds.get) if kinds else None


def host_memory(d: CopyDirection | dict) -> str | None:
    """main_kind(), with its share of the bytes where other kinds carry 1% or more: 'Pageable 97%'."""
    kind = main_kind(d)
    kind_bytes = _kind_counts(d)[0]
    total = sum(kind_bytes.values())
    share = kind_bytes[kind] / total if kind and total else 1.0
    return kind if share >= 0.995 else f"{kind} {share:.0%}"


def time_breakdown(summary: dict) -> list[tuple[str, float]]:
    """(label, ns) parts of the GPUs' time in the window, largest idle causes named, the rest 'idle: other'."""
    gpu = summary.get("gpu") or {}
    devices = gpu.get("devices") or []
    total = sum(d.get("window_ns") or 0 for d in devices) or (summary["window"].get("duration_ns") or 0)
    if not total:
        return []
    busy, compute = gpu.get("busy_ns") or 0, gpu.get("compute_ns") or 0
    parts = [("kernels", float(compute))]
    copies = {k: summary["memcpy"][k] for k in ("dtoh", "htod", "dtod") if summary["memcpy"][k].get("total_ns")}
    copy_ns = sum(d["total_ns"] for d in copies.values())
    outside = max(busy - compute, 0)  # copy time not under kernels, shared out by each direction's copy time
    for k, d in copies.items():
        parts.append((f"{DIRECTIONS[k]} ({main_kind(d) or '?'})", outside * d["total_ns"] / copy_ns))
    idle: dict[str, float] = {}
    for c in (summary.get("idle") or {}).get("causes") or []:
        label = cause_label(c["cause"], c.get("subject"))
        idle[label] = idle.get(label, 0.0) + c["idle_ns"]
    parts += sorted(idle.items(), key=lambda x: -x[1])
    rest = total - sum(ns for _, ns in parts)
    if rest > 0.001 * total:
        parts.append(("idle: other", rest))
    return [(label, ns) for label, ns in parts if ns > 0]
