"""The report's PNGs, in the one palette (analysis/render/palette.py): a copy is coloured by its direction and host
memory kind, idle time by its cause, as in every per-trace chart. A chart no trace gives a figure for is not drawn:
each function returns None then, and the report says so in its text."""
from __future__ import annotations


import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..analysis.render import palette
from ..analysis.render.formats import MS
from ..analysis.render.plots import draw_link, idle_by_cause, link_words, save, timeline
from ..analysis.facade import time_breakdown
from ..analysis.result import Result
from ..nsys_core.contracts import DEFAULT_LINK_GBPS

MEASURE = "#6C7A89"  # a figure of the whole stage (steps/s): no cause, no copy, so none of theirs


def _dtoh_key(memory: str) -> str:
    """The palette key of a row's DtoH copies ('Pinned', 'Pageable', 'Pageable, Pinned': the first)."""
    kinds = [k for k in (memory or "").split(", ") if k]
    return palette.copy_key("DtoH", kinds[0] if kinds else None)


def _legend(ax, keys, **kw):
    keys = list(dict.fromkeys(keys))
    ax.legend([plt.Rectangle((0, 0), 1, 1, facecolor=palette.color(k), lw=0) for k in keys],
              [palette.key_label(k) for k in keys], fontsize=8, **kw)


def _bar(df: pd.DataFrame, col: str, title: str, ylabel: str, fmt="{:.2f}", ref=None, ref_label="", hatch=None,
         colors=None):
    """(axes, figure, rows drawn) of a bar per row with a figure in col; None when no row has one."""
    d = df[df[col].notna()]
    if d.empty:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.8))
    x = np.arange(len(d))
    bars = ax.bar(x, d[col], color=colors(d) if colors else MEASURE, lw=0)
    for b, h in zip(bars, hatch or []):
        b.set_hatch(h)
        b.set_edgecolor("white")
    for b, v in zip(bars, d[col]):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), fmt.format(v), ha="center", va="bottom", fontsize=8)
    if ref is not None:
        ax.axhline(ref, ls="--", lw=1, color="#333333")
        ax.text(-0.45, ref * 1.02, ref_label, ha="left", va="bottom", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(d["stage"], rotation=20, ha="right", fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.set_ylim(0, max(float(d[col].max()) * 1.18, (ref or 0) * 1.1) or 1)
    return ax, fig, d


def throughput(df, path):
    """Steps/s per stage against the compute ceiling (its bar in the kernels' colour); hatched bars come from the
    trace (profiled). None without a figure."""
    mixed = not (df["throughput_source"] == "bench (unprofiled)").all()
    src = "hatched: from the trace, profiled" if mixed else "unprofiled bench"
    ceil = df.loc[df["stage"] == "ceiling", "steps_per_s"]
    got = _bar(df, "steps_per_s", f"Throughput per stage (steps/s; {src})", "steps/s",
               ref=float(ceil.iloc[0]) if len(ceil) else None, ref_label="compute ceiling",
               hatch=["//" if s == "trace" else "" for s in df.loc[df["steps_per_s"].notna(), "throughput_source"]],
               colors=lambda d: [palette.color("compute") if s == "ceiling" else MEASURE for s in d["stage"]])
    return save(got[1], path) if got else None


def utilization(df, path):
    """GPU busy (kernels and copies) and compute (kernels only) per stage; None without a GPU figure."""
    d = df[df["gpu_utilization"].notna()]
    if d.empty:
        return None
    # a trace without a kernel table has no compute figure (None): no bar, "n/a" where it would stand
    compute = pd.to_numeric(d["compute_utilization"], errors="coerce")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    x = np.arange(len(d))
    ax.bar(x - 0.2, 100 * d["gpu_utilization"], 0.4, color=palette.color("busy"))
    ax.bar(x + 0.2, 100 * compute.fillna(0), 0.4, color=palette.color("compute"))
    for i, (a, b) in enumerate(zip(d["gpu_utilization"], compute)):
        ax.text(i - 0.2, 100 * a, f"{100 * a:.0f}", ha="center", va="bottom", fontsize=7)
        ax.text(i + 0.2, 0 if pd.isna(b) else 100 * b, "n/a" if pd.isna(b) else f"{100 * b:.0f}", ha="center",
                va="bottom", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(d["stage"], rotation=20, ha="right", fontsize=9)
    ax.set_ylabel("% of the capture window")
    ax.set_ylim(0, 115)
    _legend(ax, ["busy", "compute"], loc="upper left", ncol=2)
    ax.set_title("GPU utilisation per stage (from the traces)", fontsize=11)
    return save(fig, path)


def idle_per_step(stages: list[str], analyses: list[Result]) -> pd.DataFrame:
    """ms of GPU idle time per step by palette key (a cause; 'other' the idle time no cause holds), one row per stage
    with steps, from the breakdown (every idle nanosecond, short gaps too): parts of the steps section's idle per step,
    the figure each bar is labelled with."""
    rows = {}
    for stage, a in zip(stages, analyses):
        doc = a.doc
        n = (doc.steps.count if doc.steps else 0) or 0
        parts = [(palette.part_key(label), ns) for label, ns in time_breakdown(doc) if label.startswith("idle")]
        if n and doc.gpu:
            row: dict[str, float] = {}
            for key, ns in parts:
                row[key] = row.get(key, 0.0) + ns / n / 1e6
            rows[stage] = row
    return pd.DataFrame.from_dict(rows, orient="index").fillna(0.0)


def gaps(stages: list[str], analyses: list[Result], path):
    """GPU idle time per step, stacked by cause, per stage; None when no stage has steps and a GPU."""
    d = idle_per_step(stages, analyses)
    if d.empty:
        return None
    weights = d.sum().to_dict()
    named, folded = palette.legend_keys({k: weights[k] for k in palette.causes() + ("other",) if k in weights})
    fig, ax = plt.subplots(figsize=(9, 3.8))
    x, bottom = np.arange(len(d)), np.zeros(len(d))
    for key in [k for k in palette.causes() + ("other",) if k in d]:
        shown = "other" if key in folded else key
        ax.bar(x, d[key], bottom=bottom, color=palette.color(shown), lw=0)
        bottom += d[key].to_numpy()
    per_step = {stage: a.doc.steps.mean_gpu_idle_ns for stage, a in zip(stages, analyses) if a.doc.steps}
    for i, (stage, v) in enumerate(zip(d.index, bottom)):  # the label is the analysis's figure, the bar its parts
        ax.text(i, v, MS.format(per_step[stage] / 1e6), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(d.index, rotation=20, ha="right", fontsize=9)
    ax.set_ylabel("ms per step")
    ax.set_ylim(0, float(bottom.max()) * 1.18 or 1)
    ax.set_title("GPU idle time per step by cause (every idle gap, short ones too)", fontsize=11)
    ax.legend([plt.Rectangle((0, 0), 1, 1, facecolor=palette.color(k), lw=0) for k in named],
              [palette.key_label(k) for k in named], fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5),
              frameon=False)
    return save(fig, path)


def dtoh(df, path, link_gbps=DEFAULT_LINK_GBPS, link=None):
    """DtoH time per copy and its GB/s per stage, against the host link (its figure said with where it comes from:
    link, the analysis's trace.link of the trace it was taken from), coloured by host memory kind; None without
    DtoH copies."""
    d = df[df["dtoh_ms"].notna()]
    if d.empty:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.1))
    x = np.arange(len(d))
    keys = [_dtoh_key(m) for m in d["dtoh_memory"]]
    for ax, col, unit in ((a1, "dtoh_ms", "ms per copy"), (a2, "dtoh_gbps", "GB/s")):
        bars = ax.bar(x, d[col], color=[palette.color(k) for k in keys], lw=0)
        for b, v in zip(bars, d[col]):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x)
        ax.set_xticklabels(d["stage"], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(unit)
    over = [s for s, v in zip(d["stage"], d["dtoh_gbps"]) if v > link_gbps]
    words = link_words(link.source if link else None) + (f"\n({', '.join(over)} above it)" if over else "")
    draw_link(a2, link_gbps, words.strip(), "DtoH bandwidth by host memory kind")
    a2.set_ylim(0, max(link_gbps * 1.15, float(d["dtoh_gbps"].max()) * 1.15))
    a1.set_yscale("log")
    a1.set_title("DtoH duration per output copy (log scale)", fontsize=10)
    _legend(a1, keys, loc="upper right")
    return save(fig, path)


def overlap(df, path):
    """Share of each stage's DtoH copy time that overlapped kernels, coloured by host memory kind; None when no
    stage has both copies and kernels."""
    d = df.assign(ov=100 * df["dtoh_overlap"])
    got = _bar(d, "ov", "Share of DtoH copy time that overlapped kernels", "%", fmt="{:.0f}%",
               colors=lambda r: [palette.color(_dtoh_key(m)) for m in r["dtoh_memory"]])
    if not got:
        return None
    ax, fig, shown = got
    _legend(ax, [_dtoh_key(m) for m in shown["dtoh_memory"]], loc="upper left")
    return save(fig, path)


def last_step_view(analysis) -> tuple[int, int, int]:
    """(start, end, ns between steps) of timelines.png's row: the time between the last two step ranges (the GPU
    idles there in a program that prepares its batch between steps: multiproc's memory mapping), then the last step
    and one step period from its start (an asynchronous step's range ends before its GPU work), within the window."""
    st = analysis.tables["steps"].sort_values("start_ns")
    last = st.iloc[-1]
    start = int(last["start_ns"])
    between = start - int(st["end_ns"].iloc[-2]) if len(st) > 1 else 0
    between = max(between, 0)  # overlapping ranges: nothing between them
    rate = analysis.doc.steps.per_second
    period = int(1e9 / rate) if rate else int(last["duration_ns"])
    end = start + max(int(last["duration_ns"]), period)
    window_end = analysis.doc.window.end_ns
    if isinstance(window_end, int):  # a figure, not None or left out (ABSENT)  # past the window nothing is analysed: no cause to draw, so no blank to show
        end = max(int(last["end_ns"]), min(end, int(window_end)))
    return start - between, end, between


def _row_title(stage: str, last, between: int, span_ns: int, rate: float | None) -> str:
    """What one row of timelines.png draws, and its own time scale."""
    # back-to-back ranges (a launch's few microseconds apart) have nothing between them worth a word
    before = f"{between / 1e6:,.0f} ms between steps, then " if between >= 5e5 else ""
    period = f"; step period {1e3 / rate:,.0f} ms" if rate else ""
    return (f"{stage}: {before}{last['name']} (range {last['duration_ns'] / 1e6:,.0f} ms{period})   "
            f"[its own time scale: 0 to {span_ns / 1e6:,.0f} ms]")


def timelines(items: list[tuple[str, object, object]], path) -> tuple[str | None, list[str]]:
    """One steady step per stage, stacked, with the time before it (since the step before) and its GPU idle gaps
    coloured by cause; each row on its own time scale (steps differ 20x), said in its title. (path, or None when no
    stage has steps; the stages left out: no steps)."""
    has_steps = lambda a: a.tables.get("steps") is not None and len(a.tables["steps"]) > 0  # noqa: E731
    drawn = [(s, a, t) for s, a, t in items if has_steps(a)]
    left = [s for s, a, _ in items if not has_steps(a)]
    if not drawn:
        return None, left
    n = len(drawn)
    fig, axes = plt.subplots(n, 1, figsize=(12, 2.2 * n + 0.4))
    for ax, (stage, analysis, trace) in zip(np.atleast_1d(axes), drawn):
        last = analysis.tables["steps"].sort_values("start_ns").iloc[-1]
        nvtx = trace.host.nvtx
        tid = int(nvtx.loc[nvtx["name"] == last["name"], "global_tid"].iloc[0])
        start, end, between = last_step_view(analysis)
        timeline(ax, trace.device.kernels_touching(start, end), analysis.tables["memcpy"], nvtx, start, end, tid,
                 title=_row_title(stage, last, between, end - start, analysis.doc.steps.per_second),
                 idle=idle_by_cause(analysis, (start, end)))
    return save(fig, path, dpi=100), left
