"""Two captures without GPU work (issue 57): the loops by the program's own clock. A program traced on a machine
without a GPU (or two torch.profiler traces of CPU work) has no GPU time, copies or idle gaps to compare, but it has a
loop whose time a fix changed: from its first step (or the end of its imports and model construction) to the end of
its last step's work (sections/loop.py cpu_of, Side.loop), and the lines of the program that loop spent its time at
(rules/cpu_lines.py, one finding each). The verdict is the same line as on a GPU: faster or slower over the whole loop,
the findings resolved and new."""
from __future__ import annotations

from .comparability import NotComparable
from .comparison import Comparison, Found, compared
from .loop import LoopSpeed
from .matching import findings
from .metrics import cpu_metrics
from .profiler_cost import ProfilerCost
from .side import LoopSide, LoopSides, Side
from .throughput import cpu_throughput, work_of
from .verdict import verdict

NO_STEPS = ("no steps in either trace: the loops' time is compared, the same work assumed on both sides (mark each "
            "step with an NVTX range 'step N' to compare per step)")


def verify_cpu(before: Side, after: Side, warnings: list[str], fail_if_slower: float | None = None,
               fail_on_new: str | None = None) -> Comparison:
    """Two captures without GPU work compared by their loops (Side.loop): steps/s over the loop where both mark
    steps, else the loop's time (the same work assumed, and said); the lines' findings matched as on a GPU."""
    if not (before.loop and after.loop):
        missing = [s.label or s.path for s in (before, after) if not s.loop]
        raise NotComparable(f"{' and '.join(missing)}: no loop to time (no step ranges, and no Python stacks beside "
                            "the trace); trace both with `nsys-transfer run` (or `make trace`), which samples the "
                            "stacks, or mark each step with an NVTX range 'step N'")
    speed = cpu_throughput(before, after)
    work = work_of(before, after, speed)
    rows = findings(before, after, work)
    b, a = speed.before, speed.after
    sides = LoopSides(before=LoopSide.of(before.loop, per_second=b, unit=speed.unit),
                      after=LoopSide.of(after.loop, per_second=a, unit=speed.unit))
    loop = LoopSpeed(before=b, after=a, change=a / b - 1 if b and a else None, sides=sides,
                     why=_cpu_loops_said(before, after),
                     profiler_cost=ProfilerCost(per_call_ns=None, bias=None, said=None))
    # a line new after the fix is often the fix's own (the vectorised call that replaced a loop): the verdict names it
    # where it holds a high share of the loop; the table lists every one
    v = verdict(speed, [r for r in rows if not (r.status == "new" and r.after_severity != "high")], loop)
    warnings = [*warnings, *([NO_STEPS] if speed.unit == "loops/s" else [])]
    found = Found(speed=speed, rows=rows, verdict=v, loop=loop, figures=cpu_metrics(before, after, speed),
                  warnings=warnings)
    return compared(before, after, found, fail_if_slower, fail_on_new)


def _cpu_loops_said(before: Side, after: Side) -> str:
    """Where each loop starts and ends, in words: what the verdict's times are of."""
    said = "; ".join(f"{label}: {s.loop['duration_ns'] / 1e9:,.2f} s from {s.loop['start_from']} to "
                     f"{s.loop['end_from']}" for label, s in (("before", before), ("after", after)))
    return (f"no GPU work on either side, so the loops are compared by their time as the program's own clock would "
            f"take it (set-up before them left out): {said}")
