"""The one line verify prints first: faster or slower by how much (over the whole loop, with the steady state's figure
beside it), the findings resolved and introduced, and what limits the program now."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .matching import LIMITS, FindingRow, finding_name
from .throughput import Speed

SAME_SPEED = 0.03      # within 3%: neither faster nor slower


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The line verify prints first and last, the change it says (after / before - 1; None where unknown), the
    findings resolved and the high and medium ones new."""
    line: str
    change: float | None
    resolved: tuple[str, ...]
    new: tuple[str, ...]


class Rates(Protocol):
    """The whole loop's rates on each side and their change (loop.LoopSpeed, the loops cpu.py compares)."""
    before: float | None
    after: float | None
    change: float | None


def verdict(speed: Speed, rows: list[FindingRow], whole_loop: Rates | None = None) -> Verdict:
    """One line: faster or slower by how much over the loop as the program runs it (whole_loop), with the steady
    state's figure beside it ('in a longer run'); which findings went, which came. Without a loop, the steady state's."""
    pace, change = _pace(speed.before, speed.after)
    if speed.bounded and change is not None and abs(change) > SAME_SPEED:
        pace = _bound_of(pace, change, speed.bounded)
    if whole_loop and whole_loop.change is not None:
        steady_pace = pace
        pace, change = _pace(whole_loop.before, whole_loop.after)
        pace += " over the whole loop" + (f" (in a longer run: {steady_pace})" if steady_pace != pace else "")
    resolved = tuple(finding_name(f) for f in rows if f.status == "resolved")
    new = tuple(finding_name(f) for f in rows if f.status == "new" and f.after_severity in ("high", "medium"))
    line = (f"{pace}; resolved: {', '.join(resolved) or 'none'}; new: {', '.join(new) or 'none'}")
    if any(f.status == "limit reached" for f in rows):
        line += "; " + _limit_said(rows)
    return Verdict(line=line, change=change, resolved=resolved, new=new)


def _pace(b: float | None, a: float | None) -> tuple[str, float | None]:
    """'1.65x faster', '12% faster', 'about as fast (+1.0%)', '39% slower' or 'speed unknown', and after / before - 1."""
    change = a / b - 1 if b and a else None
    if change is None:
        return "speed unknown", None
    if abs(change) <= SAME_SPEED:
        return f"about as fast ({100 * change:+.1f}%)", change
    if change > 0:
        return (f"{a / b:.2f}x faster" if a / b >= 1.5 else f"{100 * change:.0f}% faster"), change
    return f"{100 * (1 - a / b):.0f}% slower", change


def _bound_of(pace: str, change: float, bounded: tuple[str, ...]) -> str:
    """The steady state's pace where a side's rate is an upper bound (its workers' pace seen apart from its loop): an
    after side's bound bounds the speed-up from above, a before side's from below; both: unknown which way."""
    if len(bounded) > 1:
        return f"about {pace}"
    faster = change > 0
    up = (bounded[0] == "after") == faster  # the bound is on the side that makes the change larger
    return f"{'up to' if up else 'at least'} {pace}"


def _limit_said(rows: list[FindingRow]) -> str:
    """What gpu-bound on the after side means for the verdict: the GPU is the limit only where no other high or medium
    finding stands after it (a new input-bound beside "the GPU is now the limit" would contradict it); else the
    kernels are the largest share and the costliest of the others is named as what limits the program still."""
    left = [f for f in rows if f.rule not in LIMITS and f.after_ns and f.after_severity in ("high", "medium")]
    if not left:
        return "the GPU is now the limit (gpu-bound)"
    top = max(left, key=lambda f: f.after_ns or 0)
    return f"the kernels now take most of the time (gpu-bound), and {finding_name(top)} still holds the GPU back"
