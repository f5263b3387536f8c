"""The figures side by side: each one before and after, its change, and which way is better."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..common.typed_json import ABSENT, Absent
from ..document import Document
from ..sections.breakdown import host_memory
from ..sections.copies import CopyDirection
from .side import Side
from .throughput import Speed, work_of

NEAR_ZERO_RATIO = 100.0  # before under 1% of after: near zero, the change said in the unit, not in percent


def _ms(ns) -> float | None:
    return ns / 1e6 if ns is not None else None


def _syncs_per_step(d: Document) -> float | None:
    n = d.steps.count
    setup = d.steps.setup
    calls = setup.sync_calls_in_steps if setup else d.idle.sync_calls if d.idle else None
    return calls / n if n and calls is not None else None


def _busy(d: Document, compute: bool = False) -> float:
    """The GPU's busy share in %, or its kernels' (compute); 0 without GPU work."""
    return 100 * ((d.gpu.compute_utilization if compute else d.gpu.utilization) if d.gpu else 0)


# key: (label, unit, value of a document, which way is better); a label's "{per}" and a value's `n`: the work each
# side did (its steps or iterations, as the throughput counts them), so two windows of different lengths compare
METRICS: dict[str, tuple[str, str, Callable[[Document, float | None], object], str | None]] = {
    "gpu_busy": ("GPU busy", "%", lambda d, n: _busy(d), "higher"),
    "gpu_compute": ("GPU compute (kernels)", "%", lambda d, n: _busy(d, compute=True), "higher"),
    "idle_per_step_ms": ("GPU idle per step", "ms", lambda d, n: _ms(d.steps.mean_gpu_idle_ns), "lower"),
    "dtoh_ms": ("DtoH copy {per}", "ms", lambda d, n: _copy_ms(d.memcpy.dtoh, n), "lower"),
    "dtoh_gbps": ("DtoH speed", "GB/s", lambda d, n: d.memcpy.dtoh.gbps, "higher"),
    "dtoh_memory": ("DtoH host memory", "", lambda d, n: host_memory(d.memcpy.dtoh), None),
    "htod_ms": ("HtoD copy {per}", "ms", lambda d, n: _copy_ms(d.memcpy.htod, n), "lower"),
    "htod_gbps": ("HtoD speed", "GB/s", lambda d, n: d.memcpy.htod.gbps, "higher"),
    "htod_memory": ("HtoD host memory", "", lambda d, n: host_memory(d.memcpy.htod), None),
    "overlap": ("DtoH copy under kernels", "%", lambda d, n: _dtoh_overlap(d.memcpy.dtoh), "higher"),
    "syncs_per_step": ("host syncs per step", "", lambda d, n: _syncs_per_step(d), "lower"),
}


@dataclass(frozen=True, kw_only=True)
class MetricRow:
    """One figure side by side (verify's `metrics[]`): before and after in its unit, which way is better, after -
    before and after / before - 1 (_delta_and_change); the throughput's row says where it came from and which sides'
    rates are upper bounds; a row whose change moved the "wrong" way for a good reason carries a note."""
    key: str
    label: str
    unit: str
    before: float | str | None
    after: float | str | None
    better: str | None
    source: str | Absent = ABSENT
    bounded: tuple[str, ...] | Absent = ABSENT
    delta: float | None
    change: float | None
    note: str | Absent = ABSENT


def _row(key: str, label: str, unit: str, before, after, better: str | None, **throughput) -> MetricRow:
    """A figure's row, its delta and change worked out (throughput: the throughput row's source and bounded)."""
    delta, change = _delta_and_change(before, after, unit)
    return MetricRow(key=key, label=label, unit=unit, before=before, after=after, better=better, delta=delta,
                     change=change, **throughput)


def metrics(before: Side, after: Side, speed: Speed) -> list[MetricRow]:
    """Each figure before and after, its change, and whether the change is for the better."""
    rows = [_row("throughput", "throughput", speed.unit or "", speed.before, speed.after, "higher",
                 source=speed.source, bounded=speed.bounded)]
    nb, na, per = work_of(before, after, speed)
    for key, (label, unit, value, better) in METRICS.items():
        rows.append(_row(key, label.format(per=per), unit, value(before.doc, nb), value(after.doc, na), better))
    return _explain_busy(rows, per)


CPU_METRICS = ("loop_s", "main_thread_ms")  # two captures without GPU work: the figures beside the throughput


def cpu_metrics(before: Side, after: Side, speed: Speed) -> list[MetricRow]:
    """Two captures without GPU work (cpu.py): the throughput, each loop's time, and the main thread's sampled time in
    its loop (where the stacks give it)."""
    return [_row("throughput", "throughput", speed.unit or "", speed.before, speed.after, "higher",
                 source=speed.source, bounded=()),
            _row("loop_s", "the loop's time", "s", before.loop["duration_ns"] / 1e9, after.loop["duration_ns"] / 1e9,
                 "lower"),
            _row("main_thread_ms", "main thread in the loop", "ms", _main_thread_ms(before.doc),
                 _main_thread_ms(after.doc), "lower")]


def _main_thread_ms(d: Document) -> float | None:
    ns = d.code.cpu_ns if d.code else None
    return ns / 1e6 if ns else None


def _delta_and_change(b, a, unit: str) -> tuple[float | None, float | None]:
    """after - before in the figure's unit (points for a percentage), and after / before - 1 where that ratio means
    something: not for a percentage (47% -> 99% is +52 points, not +110%), and not from (near) zero, where a ratio
    measures how small before was (0.3 ms -> 1,322 ms of idle is +1,322 ms, not +391,732%)."""
    if not isinstance(b, (int, float)) or not isinstance(a, (int, float)):
        return None, None
    ratio_means = unit != "%" and b > 0 and a >= 0 and a <= NEAR_ZERO_RATIO * b
    return a - b, (a / b - 1) if ratio_means else None


def _copy_ms(direction: CopyDirection, n: float | None) -> float:
    """A direction's copy time in ms, per unit of work when n is given."""
    ms = direction.total_ns / 1e6
    return ms / n if n else ms


def _dtoh_overlap(dtoh: CopyDirection) -> float | None:
    """The share of DtoH copy time under kernels, as analyze-trace's DtoH line says it; None without DtoH copies (the
    whole memcpy section's share counts HtoD and unified memory's migrations too)."""
    share = dtoh.overlap_fraction
    return None if share is None or not dtoh.count else 100 * share


def _explain_busy(rows: list[MetricRow], per: str) -> list[MetricRow]:
    """GPU busy counts copies as busy: where it falls while the copies' time falls more and the compute share does
    not, the figure moved the "wrong" way for a good reason; a note says so."""
    by = {r.key: r for r in rows}
    busy, compute = by["gpu_busy"], by["gpu_compute"]
    copies_before = (by["dtoh_ms"].before or 0) + (by["htod_ms"].before or 0)
    copies_after = (by["dtoh_ms"].after or 0) + (by["htod_ms"].after or 0)
    if busy.delta is not None and busy.delta < 0 and copies_after < 0.5 * copies_before and \
            (compute.delta or 0) >= 0:
        note = (f"busy counts copies: their time {per} fell from {copies_before:,.0f} to "
                f"{copies_after:,.0f} ms, while the kernels' share went from {compute.before:.0f}% to "
                f"{compute.after:.0f}%")
        return [replace(r, note=note) if r is busy else r for r in rows]
    return rows
