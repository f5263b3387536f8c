"""The steady state's rates with each side's output work past the window: output workers that were still starting
(a one-time start, left out; their pace once started counted where it is slower than the loop's), or a backlog of
output work a longer run keeps (counted)."""
from __future__ import annotations

from dataclasses import replace

from .loop import drain_ms
from .side import Side
from .throughput import Speed, Work

BACKLOG_ITERATIONS = 2.0  # output work past the steady window longer than this many iterations: a backlog, counted


def with_backlog(before: Side, after: Side, speed: Speed, work: Work) -> Speed:
    """The steady state's rates with each side's output work: where worker processes were still starting (importing)
    after the steady window began, the wait for them is a one-time set-up, left out, and their pace once started (the
    window's work over their time at it, shared among them) counts where it is slower than the loop's (_late_workers);
    else output work (worker processes, threads) that ran on past the steady window for longer than
    BACKLOG_ITERATIONS of its iterations is work the loop handed on faster than it was done, and grows with the run
    (the workers are the limit), so a longer run keeps it: counted in that side's rate, and said. A shorter tail (the
    last output's post-processing) is set-up, left to the whole loop."""
    if speed.before is None or not (before.loop and after.loop):
        return speed
    rates, bounded, said = [speed.before, speed.after], list(speed.bounded), []
    for i, (label, side, n) in enumerate((("before", before, work[0]), ("after", after, work[1]))):
        rate, drain_s = rates[i], drain_ms(side) / 1e3
        if not rate:
            continue
        units = n or (_kernel_count(side) if speed.unit == "kernels/s" else 1)
        span_s = units / rate  # the steady window the rate stands for; without a count, the window is one iteration
        name = side.label or label
        if _started_late(side):
            rates[i], line = _late_workers(side, name, units, rate)
            bounded.append(label)
            said.append(line)
        elif drain_s > BACKLOG_ITERATIONS * span_s / (n or 1):
            rates[i] = units / (span_s + drain_s)
            said.append(f"{name}'s output work ran {drain_s:,.2f} s past its loop's GPU work, a backlog "
                        f"(more than {BACKLOG_ITERATIONS:g} iterations' time) that a longer run keeps: counted; that "
                        "work ran in other threads or processes, which nsys traces and slows too, by a cost this "
                        "trace cannot measure: time the program unprofiled to know its pace")
    if not said:
        return speed
    return replace(speed, before=rates[0], after=rates[1], bounded=tuple(bounded),
                   source=speed.source + "; " + "; ".join(said))


def _kernel_count(side: Side) -> int:
    """The side's kernel count in its window; 0 without the kernels section."""
    return (side.doc.kernels.count if side.doc.kernels else 0) or 0


def _started_late(side: Side) -> bool:
    """Output worker processes were still starting (sections/loop.py WorkersStart) after the steady window began."""
    ws = side.loop.get("workers_start")
    return bool(ws) and ws["first_ready_ns"] > side.doc.window.start_ns


def _late_workers(side: Side, name: str, units: float, rate: float) -> tuple[float, str]:
    """A side whose output workers started after its steady window began: their pace once started (the window's work,
    with the warm-up's where they started after the window ended, over the time they spent on it in all, shared among
    those that worked: each one's start is its own) where it is slower than the loop's, else the loop's; and what was
    said. The capture shows the loop and its workers apart, never sharing the CPUs and memory, so the figure is what a
    longer run reaches at most."""
    ws, w = side.loop["workers_start"], side.doc.window
    ready = ws["first_ready_ns"]
    warmup = (side.doc.setup.warmup.count if side.doc.setup else 0) or 0
    done = units + (warmup if ready >= w.end_ns else 0)  # what was waiting for them when they started
    each_s = max(ws["busy_ns"] / ws["working"] / 1e9, 1e-9)
    pace = done / each_s
    slower = pace < rate
    line = (f"{name}'s {ws['processes']} output worker processes were still starting (importing) when its steady "
            f"state began: the first took {(ready - ws['started_ns']) / 1e9:,.2f} s and began work "
            f"{max(0, ready - w.start_ns) / 1e9:,.2f} s into it, a one-time start a longer run does not repeat: "
            f"left out; once started, {ws['working']} of them did {done:g} iterations with {each_s:,.2f} s of work "
            f"each ({pace:,.2f}/s), "
            + ("slower than the loop: counted" if slower else f"no slower than the loop ({rate:,.2f}/s): the loop's "
               "pace stands")
            + "; the capture never shows the loop and its workers running together (sharing the CPUs and memory), so "
              "a longer run reaches this pace at most: capture more iterations to measure it")
    return (pace if slower else rate), line
