"""The names of the parts of a trace's GPU time (document/breakdown.time_breakdown makes the parts): an idle cause's
chart label, a copy direction's, and the host memory kind most of a direction's bytes went to."""
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
