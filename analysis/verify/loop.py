"""The loop as each program runs it (Side.loop, read by sections/loop.py): its speed from the first iteration to the
end of the last output's work, each side's set-up beyond the steady state (warm-up before it, drain after it), why
the whole loop's figure and the steady state's differ, and nsys's own cost in it."""
from __future__ import annotations

from dataclasses import dataclass

from .profiler_cost import ProfilerCost, profiler_cost
from .side import LoopSide, LoopSides, Side
from .throughput import Speed, Work


@dataclass(frozen=True, kw_only=True)
class LoopSpeed:
    """The loop as each program runs it (verify's `loop`): each side's rate over it and their change (after / before
    - 1; None where a rate is unknown), each side's loop, why its figure differs from the steady state's, and nsys's
    own cost in it."""
    before: float | None
    after: float | None
    change: float | None
    sides: LoopSides
    why: str
    profiler_cost: ProfilerCost


def loop_speed(before: Side, after: Side, speed: Speed, work: Work) -> LoopSpeed | None:
    """The loop as each program runs it (Side.loop): its throughput (the steady state's work plus its warm-up
    iterations or steps, over first iteration to the last output's end), each side's set-up beyond the steady state
    (warm-up before it, drain after it, ms), why the two figures differ, and nsys's own cost; None without both loops
    or a steady-state throughput."""
    lb, la = before.loop, after.loop
    if not lb or not la or speed.before is None:
        return None
    nb, na, _ = work
    rates = [_loop_rate(s, n) for s, n in ((before, nb), (after, na))]
    b, a = (LoopSide.of(side.loop, per_second=rate, unit=speed.unit if n else "loops/s", warmup_ms=_warmup_ms(side),
                        drain_ms=drain_ms(side), workers_wait_ms=_workers_wait_ms(side))
            for side, rate, n in ((before, rates[0], nb), (after, rates[1], na)))
    sides = LoopSides(before=b, after=a)
    change = rates[1] / rates[0] - 1 if all(rates) else None
    return LoopSpeed(before=rates[0], after=rates[1], change=change, sides=sides, why=_why_differ(sides),
                     profiler_cost=profiler_cost(sides))


def drain_ms(side: Side) -> float:
    """The loop's part after the steady-state window (and the output pipeline's close it counts): work other threads
    or processes did after it."""
    w = side.doc.window
    return max(0, side.loop["end_ns"] - w.end_ns - (w.teardown_ns or 0)) / 1e6


def _loop_rate(side: Side, n: float | None) -> float | None:
    """Work per second over the loop: the steady state's work and the warm-up's; 1/loop time where none is counted."""
    ns = side.loop["duration_ns"]
    if not ns:
        return None
    warmup = (side.doc.setup.warmup.count if side.doc.setup else 0) or 0
    return (n + warmup) / (ns / 1e9) if n else 1e9 / ns


def _warmup_ms(side: Side) -> float:
    """The loop's part before the steady state: the first iterations' warm-up (cuDNN autotuning, module loading)."""
    return max(0, side.doc.window.start_ns - side.loop["start_ns"]) / 1e6


def _workers_wait_ms(side: Side) -> float:
    """The part of the drain spent waiting for output worker processes to start (sections/loop.py WorkersStart): from
    the steady window's end (and close) to the first of them at work."""
    ws, w = side.loop.get("workers_start"), side.doc.window
    if not ws:
        return 0.0
    waited = ws["first_ready_ns"] - w.end_ns - (w.teardown_ns or 0)
    return min(max(0, waited) / 1e6, drain_ms(side))


def _why_differ(sides: LoopSides) -> str:
    """One line: each side's set-up in ms, the part of the loop the steady state leaves out."""
    said = "; ".join(f"{label}: {s.warmup_ms:,.0f} ms of first iterations before the steady state, "
                     f"{s.drain_ms:,.0f} ms of work after it (until {s.end_from})" + _waited(s)
                     for label, s in sides.items())
    return f"the whole loop counts each side's set-up, which the steady state leaves out: {said}"


def _waited(side: LoopSide) -> str:
    """', of which N ms ...' for a side whose loop waited for its output workers to start; else ''."""
    ws = side.workers_start
    if not ws or not side.workers_wait_ms:
        return ""
    return (f", of which {side.workers_wait_ms:,.0f} ms waiting for its {ws.processes} output worker processes "
            f"to finish starting (imports: {(ws.last_ready_ns - ws.started_ns) / 1e9:,.1f} s until the last "
            "was ready), a start that varies from machine to machine and that the profiler can lengthen, by a cost "
            "this trace cannot measure: time the program unprofiled to know it")
