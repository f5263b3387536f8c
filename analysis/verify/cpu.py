"""Two captures without GPU work (issue 57): the loops by the program's own clock. A program traced on a machine
without a GPU (or two torch.profiler traces of CPU work) has no GPU time, copies or idle gaps to compare, but it has a
loop whose time a fix changed: from its first step (or the end of its imports and model construction) to the end of
its last step's work (sections/loop.py cpu_of, Side.loop), and the lines of the program that loop spent its time at
(rules/cpu_lines.py, one finding each). The verdict is the same line as on a GPU: faster or slower over the whole loop,
the findings resolved and new."""
from __future__ import annotations

from .comparability import NotComparable
from .gates import gates
from .matching import findings
from .metrics import cpu_metrics
from .noise import noise
from .predictions import prediction_held
from .side import SCHEMA, Comparison, Side
from .throughput import cpu_throughput, work_of
from .verdict import verdict


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
    b, a = speed["before"], speed["after"]
    loop = {"before": b, "after": a, "change": a / b - 1 if b and a else None,
            "sides": {label: {**side.loop, "per_second": speed[label], "unit": speed["unit"]}
                      for label, side in (("before", before), ("after", after))},
            "why": _cpu_loops_said(before, after), "profiler_cost": {"per_call_ns": None, "bias": None, "said": None}}
    # a line new after the fix is often the fix's own (the vectorised call that replaced a loop): the verdict names it
    # where it holds a high share of the loop; the table lists every one
    v = verdict(speed, [r for r in rows if not (r["status"] == "new" and r["after_severity"] != "high")], loop)
    noisy = noise(before, after, v["change"])
    v["line"] += f"; {noisy['said']}" if noisy["said"] else ""
    held = prediction_held(before.doc, after.doc, rows, speed, loop)
    failed = gates(v, rows, fail_if_slower, fail_on_new)
    warnings = [*warnings, *(["no steps in either trace: the loops' time is compared, the same work assumed on both "
                              "sides (mark each step with an NVTX range 'step N' to compare per step)"]
                             if speed["unit"] == "loops/s" else [])]
    doc = {"schema": SCHEMA, "before": {"path": before.path, "label": before.label},
           "after": {"path": after.path, "label": after.label}, "verdict": v, "metrics": cpu_metrics(before, after, speed),
           "loop": loop, "noise": noisy, "predicted": held, "findings": rows, "warnings": warnings,
           "gates": {"failed": failed, "fail_if_slower": fail_if_slower, "fail_on_new": fail_on_new},
           "exit_code": 1 if failed else 0}
    return Comparison(doc, warnings)


def _cpu_loops_said(before: Side, after: Side) -> str:
    """Where each loop starts and ends, in words: what the verdict's times are of."""
    said = "; ".join(f"{label}: {s.loop['duration_ns'] / 1e9:,.2f} s from {s.loop['start_from']} to "
                     f"{s.loop['end_from']}" for label, s in (("before", before), ("after", after)))
    return (f"no GPU work on either side, so the loops are compared by their time as the program's own clock would "
            f"take it (set-up before them left out): {said}")
