"""The figures side by side: each one before and after, its change, and which way is better."""
from __future__ import annotations

from ..sections.breakdown import host_memory
from .side import Side
from .throughput import work_of

NEAR_ZERO_RATIO = 100.0  # before under 1% of after: near zero, the change said in the unit, not in percent


def _ms(ns) -> float | None:
    return ns / 1e6 if ns is not None else None


def _syncs_per_step(s: dict) -> float | None:
    n = s["steps"].get("count")
    setup = s["steps"].get("setup") or {}
    calls = setup.get("sync_calls_in_steps", (s.get("idle") or {}).get("sync_calls"))
    return calls / n if n and calls is not None else None


# key: (label, unit, value of a summary, which way is better); a label's "{per}" and a value's `n`: the work each side
# did (its steps or iterations, as the throughput counts them), so two windows of different lengths compare
METRICS = {
    "gpu_busy": ("GPU busy", "%", lambda s, n: 100 * (s["gpu"] or {}).get("utilization", 0), "higher"),
    "gpu_compute": ("GPU compute (kernels)", "%", lambda s, n: 100 * (s["gpu"] or {}).get("compute_utilization", 0),
                    "higher"),
    "idle_per_step_ms": ("GPU idle per step", "ms", lambda s, n: _ms(s["steps"].get("mean_gpu_idle_ns")), "lower"),
    "dtoh_ms": ("DtoH copy {per}", "ms", lambda s, n: _copy_ms(s["memcpy"]["dtoh"], n), "lower"),
    "dtoh_gbps": ("DtoH speed", "GB/s", lambda s, n: s["memcpy"]["dtoh"].get("gbps"), "higher"),
    "dtoh_memory": ("DtoH host memory", "", lambda s, n: host_memory(s["memcpy"]["dtoh"]), None),
    "htod_ms": ("HtoD copy {per}", "ms", lambda s, n: _copy_ms(s["memcpy"]["htod"], n), "lower"),
    "htod_gbps": ("HtoD speed", "GB/s", lambda s, n: s["memcpy"]["htod"].get("gbps"), "higher"),
    "htod_memory": ("HtoD host memory", "", lambda s, n: host_memory(s["memcpy"]["htod"]), None),
    "overlap": ("DtoH copy under kernels", "%", lambda s, n: _dtoh_overlap(s), "higher"),
    "syncs_per_step": ("host syncs per step", "", lambda s, n: _syncs_per_step(s), "lower"),
}


def metrics(before: Side, after: Side, speed: dict) -> list[dict]:
    """Each figure before and after, its change, and whether the change is for the better."""
    rows = [{"key": "throughput", "label": "throughput", "unit": speed["unit"] or "", "before": speed["before"],
             "after": speed["after"], "better": "higher", "source": speed["source"],
             "bounded": speed.get("bounded") or []}]
    nb, na, per = work_of(before, after, speed)
    for key, (label, unit, value, better) in METRICS.items():
        rows.append({"key": key, "label": label.format(per=per), "unit": unit, "before": value(before.summary, nb),
                     "after": value(after.summary, na), "better": better})
    for r in rows:
        r["delta"], r["change"] = _delta_and_change(r["before"], r["after"], r["unit"])
    _explain_busy(rows, per)
    return rows


CPU_METRICS = ("loop_s", "main_thread_ms")  # two captures without GPU work: the figures beside the throughput


def cpu_metrics(before: Side, after: Side, speed: dict) -> list[dict]:
    """Two captures without GPU work (cpu.py): the throughput, each loop's time, and the main thread's sampled time in
    its loop (where the stacks give it)."""
    rows = [{"key": "throughput", "label": "throughput", "unit": speed["unit"] or "", "before": speed["before"],
             "after": speed["after"], "better": "higher", "source": speed["source"], "bounded": []},
            {"key": "loop_s", "label": "the loop's time", "unit": "s", "before": before.loop["duration_ns"] / 1e9,
             "after": after.loop["duration_ns"] / 1e9, "better": "lower"},
            {"key": "main_thread_ms", "label": "main thread in the loop", "unit": "ms",
             "before": _main_thread_ms(before.summary), "after": _main_thread_ms(after.summary), "better": "lower"}]
    for r in rows:
        r["delta"], r["change"] = _delta_and_change(r["before"], r["after"], r["unit"])
    return rows


def _main_thread_ms(s: dict) -> float | None:
    ns = (s.get("code") or {}).get("cpu_ns")
    return ns / 1e6 if ns else None


def _delta_and_change(b, a, unit: str) -> tuple[float | None, float | None]:
    """after - before in the figure's unit (points for a percentage), and after / before - 1 where that ratio means
    something: not for a percentage (47% -> 99% is +52 points, not +110%), and not from (near) zero, where a ratio
    measures how small before was (0.3 ms -> 1,322 ms of idle is +1,322 ms, not +391,732%)."""
    if not isinstance(b, (int, float)) or not isinstance(a, (int, float)):
        return None, None
    ratio_means = unit != "%" and b > 0 and a >= 0 and a <= NEAR_ZERO_RATIO * b
    return a - b, (a / b - 1) if ratio_means else None


def _copy_ms(direction: dict, n: float | None) -> float:
    """A direction's copy time in ms, per unit of work when n is given."""
    ms = direction.get("total_ns", 0) / 1e6
    return ms / n if n else ms


def _dtoh_overlap(s: dict) -> float | None:
    """The share of DtoH copy time under kernels, as analyze-trace's DtoH line says it; None without DtoH copies (the
    whole memcpy section's share counts HtoD and unified memory's migrations too)."""
    share = s["memcpy"]["dtoh"].get("overlap_fraction")
    return None if share is None or not s["memcpy"]["dtoh"].get("count") else 100 * share


def _explain_busy(rows: list[dict], per: str) -> None:
    """GPU busy counts copies as busy: where it falls while the copies' time falls more and the compute share does
    not, the figure moved the "wrong" way for a good reason; a note says so."""
    by = {r["key"]: r for r in rows}
    busy, compute = by["gpu_busy"], by["gpu_compute"]
    copies_before = (by["dtoh_ms"]["before"] or 0) + (by["htod_ms"]["before"] or 0)
    copies_after = (by["dtoh_ms"]["after"] or 0) + (by["htod_ms"]["after"] or 0)
    if busy["delta"] is not None and busy["delta"] < 0 and copies_after < 0.5 * copies_before and \
            (compute["delta"] or 0) >= 0:
        busy["note"] = (f"busy counts copies: their time {per} fell from {copies_before:,.0f} to "
                        f"{copies_after:,.0f} ms, while the kernels' share went from {compute['before']:.0f}% to "
                        f"{compute['after']:.0f}%")
