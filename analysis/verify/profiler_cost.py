"""nsys's own cost in each side's loop: every CUDA call it traced costs the profiled program time its unprofiled run
does not pay, so unequal call counts bias the ratio of the two loops' times; how much, and whether to say it."""
from __future__ import annotations

from ..common.defaults import NSYS_CALL_COST_NS
from .verdict import SAME_SPEED


def profiler_cost(sides: dict) -> dict:
    """nsys's own cost from the CUDA calls it traced in each loop: the cheapest calls' duration a call (the sides'
    larger floor, at least NSYS_CALL_COST_NS), times the calls; the bias it can put on the ratio of the loops' times, and whether it is
    large enough to say (over SAME_SPEED)."""
    # the cheapest calls' duration in the trace (sections/loop.py CALL_FLOOR_QUANTILE) shows only the part inside the
    # call's own timestamps, so it is taken with NSYS_CALL_COST_NS as a floor
    floors = [s["call_floor_ns"] for s in sides.values() if s["call_floor_ns"] is not None]
    per_call = max(*floors, NSYS_CALL_COST_NS) if floors else None
    b, a = sides["before"], sides["after"]
    if per_call is None or not b["duration_ns"] or not a["duration_ns"]:
        return {"per_call_ns": per_call, "bias": None, "said": None}
    cost_b, cost_a = b["cuda_calls"] * per_call, a["cuda_calls"] * per_call
    measured = b["duration_ns"] / a["duration_ns"]
    unprofiled = max(1.0, b["duration_ns"] - cost_b) / max(1.0, a["duration_ns"] - cost_a)
    bias = measured / unprofiled - 1
    said = None
    if abs(bias) > SAME_SPEED:  # a bias the verdict would call "about as fast" is not said
        how = "the cheapest tenth's duration" if per_call > NSYS_CALL_COST_NS else "as measured for nsys 2024.2"
        said = (f"nsys traced {b['cuda_calls']:,} CUDA calls before and {a['cuda_calls']:,} after; at about "
                f"{per_call / 1e3:.1f} us a call ({how}) that is {cost_b / 1e6:,.0f} and "
                f"{cost_a / 1e6:,.0f} ms of the loops, and can make the speed-up {100 * abs(bias):.0f}% "
                f"{'larger' if bias > 0 else 'smaller'} than unprofiled")
    return {"per_call_ns": per_call, "before_ms": cost_b / 1e6, "after_ms": cost_a / 1e6, "bias": bias, "said": said}
