"""nsys's own cost in each side's loop: every CUDA call it traced costs the profiled program time its unprofiled run
does not pay, so unequal call counts bias the ratio of the two loops' times; how much, and whether to say it."""
from __future__ import annotations

from dataclasses import dataclass

from ..common.defaults import NSYS_CALL_COST_NS
from ..common.typed_json import ABSENT, Absent
from .side import LoopSides
from .verdict import SAME_SPEED


@dataclass(frozen=True, kw_only=True)
class ProfilerCost:
    """nsys's own cost in the loops (verify's `loop.profiler_cost`): per CUDA call, in each loop (ms, where a call's
    cost and both loops' times are known), the bias it can put on the loops' time ratio, and the line said of it."""
    per_call_ns: float | None
    before_ms: float | Absent = ABSENT
    after_ms: float | Absent = ABSENT
    bias: float | None
    said: str | None


def profiler_cost(sides: LoopSides) -> ProfilerCost:
    """nsys's own cost from the CUDA calls it traced in each loop: the cheapest calls' duration a call (the sides'
    larger floor, at least NSYS_CALL_COST_NS), times the calls; the bias it can put on the ratio of the loops' times, and whether it is
    large enough to say (over SAME_SPEED)."""
    # the cheapest calls' duration in the trace (sections/loop.py CALL_FLOOR_QUANTILE) shows only the part inside the
    # call's own timestamps, so it is taken with NSYS_CALL_COST_NS as a floor
    b, a = sides.before, sides.after
    floors = [s.call_floor_ns for s in (b, a) if s.call_floor_ns is not None]
    per_call = max(*floors, NSYS_CALL_COST_NS) if floors else None
    if per_call is None or not b.duration_ns or not a.duration_ns:
        return ProfilerCost(per_call_ns=per_call, bias=None, said=None)
    cost_b, cost_a = b.cuda_calls * per_call, a.cuda_calls * per_call
    measured = b.duration_ns / a.duration_ns
    unprofiled = max(1.0, b.duration_ns - cost_b) / max(1.0, a.duration_ns - cost_a)
    bias = measured / unprofiled - 1
    said = None
    if abs(bias) > SAME_SPEED:  # a bias the verdict would call "about as fast" is not said
        how = "the cheapest tenth's duration" if per_call > NSYS_CALL_COST_NS else "as measured for nsys 2024.2"
        said = (f"nsys traced {b.cuda_calls:,} CUDA calls before and {a.cuda_calls:,} after; at about "
                f"{per_call / 1e3:.1f} us a call ({how}) that is {cost_b / 1e6:,.0f} and "
                f"{cost_a / 1e6:,.0f} ms of the loops, and can make the speed-up {100 * abs(bias):.0f}% "
                f"{'larger' if bias > 0 else 'smaller'} than unprofiled")
    return ProfilerCost(per_call_ns=per_call, before_ms=cost_b / 1e6, after_ms=cost_a / 1e6, bias=bias, said=said)
