"""The steady state's speed on each side: steps/s over its steady steps, else the workload records', else iterations/s
of its repeating kernel stream, else the GPU windows' inverse where the two did the same work; and the work each side
did in its window (Work), as that speed counted it, so per-step figures compare windows of different lengths."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..document import Document
from .side import Side

WORK_TOLERANCE = 0.10  # without steps, the two GPU windows compare only when the kernels' counts agree this well


class Work(NamedTuple):
    """The work each side did in its window as the throughput counted it (its steps, or iterations of the repeating
    kernel stream; None where it counted none), and what one unit of it is called ("per step")."""
    before: float | None
    after: float | None
    per: str


NOT_COUNTED = Work(None, None, "in the window")  # the throughput counted no unit of work: the same work, or unknown


@dataclass(frozen=True, kw_only=True)
class Speed:
    """Each side's steady-state rate in its unit (None where unknown), where the figures came from, and the sides whose
    rate is an upper bound (backlog.py: their workers seen apart from the loop)."""
    before: float | None
    after: float | None
    unit: str | None
    source: str
    bounded: tuple[str, ...] = ()

    def of(self, label: str) -> float | None:
        """The rate of the side named "before" or "after"."""
        return self.before if label == "before" else self.after


def throughput(before: Side, after: Side) -> Speed:
    """Steps/s over each trace's steady steps (to the end of their last output: the pipeline's drain counts), else
    from the workload records, else iterations/s of the repeating kernel stream, else the GPU windows' inverse when
    the two did the same GPU work; with where it came from."""
    sb, sa = (_with_teardown(s.doc, s.doc.steps.per_second, s.doc.steps.count) for s in (before, after))
    if sb and sa:
        return Speed(before=sb, after=sa, unit="steps/s",
                     source=_steps_source(before, after) + _teardown_said(before, after))
    wb, wa = (s.workload and s.workload.get("throughput", {}).get("steps_per_s") for s in (before, after))
    if wb and wa:
        return Speed(before=wb, after=wa, unit="steps/s", source="the workload records")
    ib, ia = _iterations(before.doc), _iterations(after.doc)
    if ib and ia:
        return Speed(before=ib[0], after=ia[0], unit="iterations/s",
                     source=f"the repeating kernel stream: {ib[1]} and {ia[1]}" + _teardown_said(before, after) +
                            _no_steps(before, after))
    kb, ka = (_kernel_count(s.doc) for s in (before, after))
    db, da = (s.doc.window.duration_ns or 0 for s in (before, after))
    if kb and ka and db and da and abs(kb - ka) <= WORK_TOLERANCE * max(kb, ka):
        return Speed(before=1e9 / db, after=1e9 / da, unit="1/s",
                     source=f"the GPU windows ({db / 1e9:.2f} s and {da / 1e9:.2f} s for {kb:,} and {ka:,} kernels: "
                            "the same work" + _no_steps(before, after) + ")")
    if kb and ka and db and da and _same_kernel_mix(before.doc, after.doc):
        return Speed(before=kb / (db / 1e9), after=ka / (da / 1e9), unit="kernels/s",
                     source=f"the kernels each GPU ran a second ({kb:,} in {db / 1e9:.2f} s and {ka:,} in "
                            f"{da / 1e9:.2f} s: the same kernels in the same shares, so the same work a kernel)" +
                            _no_steps(before, after))
    return Speed(before=None, after=None, unit=None,
                 source=f"unknown: {_no_steps(before, after)[2:]}, no workload records, no repeating kernel stream in "
                        f"both, and the two GPU windows ran different work ({kb:,} and {ka:,} kernels)")


def cpu_throughput(before: Side, after: Side) -> Speed:
    """Two captures without GPU work (cpu.py): steps/s over each loop (Side.loop) where both traces mark steps, else
    the inverse of each loop's time: loops/s (one loop a run: said so, never as a bare 1/s that reads as steps)."""
    nb, na = (s.doc.steps.count or 0 for s in (before, after))
    sb, sa = (s.loop["duration_ns"] / 1e9 for s in (before, after))
    if nb and na and sb > 0 and sa > 0:
        return Speed(before=nb / sb, after=na / sa, unit="steps/s",
                     source=f"the steps in each trace, over its loop ({nb} steps in {sb:.2f} s and {na} in {sa:.2f} s: "
                            "from the first step's start to the end of the last one's work)")
    return Speed(before=1 / sb if sb > 0 else None, after=1 / sa if sa > 0 else None, unit="loops/s",
                 source=f"each loop's time ({sb:.2f} s and {sa:.2f} s, {_no_steps(before, after)[2:]})")


def work_of(before: Side, after: Side, speed: Speed) -> Work:
    """The work each side did in its window, as the throughput counted it (steps, iterations of the repeating kernel
    stream), and what one unit is called; NOT_COUNTED when the throughput counted none (the same work on both sides,
    or unknown)."""
    if speed.unit == "steps/s" and speed.source.startswith("the steps"):
        return Work(before.doc.steps.count, after.doc.steps.count, "per step")
    if speed.unit == "iterations/s":
        return Work(_iteration_count(before.doc), _iteration_count(after.doc), "per iteration")
    return NOT_COUNTED


def _same_kernel_mix(b: Document, a: Document) -> bool:
    """Whether the two windows ran the same kernels in the same shares of their count (the top kernels' names, each
    share within WORK_TOLERANCE): then kernels a second measure the same work on both sides."""
    tb, ta = (_kernel_shares(s) for s in (b, a))
    return bool(tb) and tb.keys() == ta.keys() and all(abs(tb[k] - ta[k]) <= WORK_TOLERANCE for k in tb)


def _kernel_count(d: Document) -> int:
    """The window's kernel count; 0 without the kernels section."""
    return (d.kernels.count if d.kernels else 0) or 0


def _kernel_shares(d: Document) -> dict[str, float]:
    """Each top kernel's share of the window's kernel count."""
    n = _kernel_count(d)
    return {k.name: k.count / n for k in (d.kernels.top if d.kernels else ()) if n and k.count}


def _steady(d: Document) -> bool:
    """Whether a document's window is its steady state (not the whole capture, not a user's window)."""
    return d.window.source.startswith("steady state")


def _steps_source(before: Side, after: Side) -> str:
    span = "from the first steady step" if all(_steady(s.doc) for s in (before, after)) else "from the first step"
    return f"the steps in each trace, {span} to the end of the last one's work (GPU work and output drain included)"


def _iterations(d: Document) -> tuple[float, str] | None:
    """Iterations/s of a steady state found from the repeating kernel stream, and how it was counted."""
    n, ns = _iteration_count(d), d.window.duration_ns or 0
    if not n or not ns:
        return None
    ns += d.window.teardown_ns or 0
    period = d.setup.warmup.kernels_per_iteration
    return n / (ns / 1e9), f"{n:.1f} iterations of {period:,} kernels in {ns / 1e9:.2f} s"


def _iteration_count(d: Document) -> float | None:
    """How many iterations of its repeating kernel stream a steady-state window holds; None when it has none."""
    period = d.setup.warmup.kernels_per_iteration if d.setup else None
    kernels = _kernel_count(d)
    return kernels / period if period and kernels and _steady(d) else None


def _with_teardown(d: Document, per_second: float | None, count: int | None) -> float | None:
    """A rate over the window stretched by the output pipeline's close after it (the user's clock runs through it)."""
    teardown = d.window.teardown_ns
    if not per_second or not count or not teardown:
        return per_second
    return count / (count / per_second + teardown / 1e9)


def _teardown_said(before: Side, after: Side) -> str:
    said = [f"{s.label or 'one side'}'s output pipeline's close ({s.doc.window.teardown_ns / 1e9:.2f} s: "
            "its workers joined, its buffers unpinned and unmapped)"
            for s in (before, after) if s.doc.window.teardown_ns]
    return ("; counted: " + " and ".join(said)) if said else ""


def _no_steps(before: Side, after: Side) -> str:
    counts = [bool(s.doc.steps.count) for s in (before, after)]
    return ("; steps in only one trace" if any(counts) else
            "; no steps in the traces (mark each step with an NVTX range 'step N')")
