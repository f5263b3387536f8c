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


def main_kind(d: CopyDirection) -> str | None:
    """The host memory kind most of a direction's bytes went to or came from (by count in a summary older than
    kind_bytes); None without copies."""
    kinds = d.kind_bytes or d.kinds
    return max(kinds, key=kinds.get) if kinds else None


def host_memory(d: CopyDirection) -> str | None:
    """main_kind(), with its share of the bytes where other kinds carry 1% or more: 'Pageable 97%'."""
    kind = main_kind(d)
    total = sum(d.kind_bytes.values())
    share = d.kind_bytes[kind] / total if kind and total else 1.0
    return kind if share >= 0.995 else f"{kind} {share:.0%}"
