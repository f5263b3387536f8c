"""The report's PNGs. Colours are fixed per stage and per activity, so every chart reads the same way."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from nsys_transfer.analysis.render.plots import COLORS, save, timeline
from nsys_transfer.nsys_core.contracts import DEFAULT_LINK_GBPS

STAGE_COLORS = {"naive-input": "#8C8C8C", "baseline": "#C44E52", "multiproc": "#DD8452", "bufpool": "#CCB974",
                "async": "#8172B2", "streams": "#64B5CD", "pinned": "#55A868", "pinned-long": "#3A7D4A",
                "ceiling": "#4C72B0"}


def _color(stage):
    return STAGE_COLORS.get(stage, "#777777")


def _bar(df: pd.DataFrame, col: str, title: str, ylabel: str, path, fmt="{:.2f}", ref=None, ref_label="", hatch=None):
    d = df[df[col].notna()]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    if d.empty:  # no trace gives this figure (no steps, no copies): say so instead of an empty axis
        ax.text(0.5, 0.5, f"no trace gives {ylabel}", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=11)
        return save(fig, path)
    x = np.arange(len(d))
    bars = ax.bar(x, d[col], color=[_color(s) for s in d["stage"]])
    for b, h in zip(bars, hatch or []):
        b.set_hatch(h)
    for b, v in zip(bars, d[col]):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), fmt.format(v), ha="center", va="bottom", fontsize=8)
    if ref is not None:
        ax.axhline(ref, ls="--", lw=1, color="#333333")
        ax.text(-0.45, ref * 1.02, ref_label, ha="left", va="bottom", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(d["stage"], rotation=20, ha="right", fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.set_ylim(0, max(float(d[col].max()) * 1.18, (ref or 0) * 1.1))
    return save(fig, path)


def throughput(df, path):
    """Steps/s per stage against the compute ceiling; hatched bars come from the trace (profiled)."""
    mixed = not (df["throughput_source"] == "bench (unprofiled)").all()
    src = "hatched: from the trace, profiled" if mixed else "unprofiled bench"
    ceil = df.loc[df["stage"] == "ceiling", "steps_per_s"]
    return _bar(df, "steps_per_s", f"Throughput per stage (steps/s; {src})", "steps/s", path,
                ref=float(ceil.iloc[0]) if len(ceil) else None, ref_label="compute ceiling",
                hatch=["//" if s == "trace" else "" for s in df.loc[df["steps_per_s"].notna(), "throughput_source"]])


def utilization(df, path):
    """GPU busy (kernels and copies) and compute (kernels only) per stage."""
    d = df[df["gpu_utilization"].notna()]
    # a trace without a kernel table has no compute figure (None): no bar, "n/a" where it would stand
    compute = pd.to_numeric(d["compute_utilization"], errors="coerce")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    x = np.arange(len(d))
    ax.bar(x - 0.2, 100 * d["gpu_utilization"], 0.4, label="GPU busy (kernels + copies)", color="#9DB6D8")
    ax.bar(x + 0.2, 100 * compute.fillna(0), 0.4, label="compute (kernels only)", color=COLORS["kernel"])
    for i, (a, b) in enumerate(zip(d["gpu_utilization"], compute)):
        ax.text(i - 0.2, 100 * a, f"{100 * a:.0f}", ha="center", va="bottom", fontsize=7)
        ax.text(i + 0.2, 0 if pd.isna(b) else 100 * b, "n/a" if pd.isna(b) else f"{100 * b:.0f}", ha="center",
                va="bottom", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(d["stage"], rotation=20, ha="right", fontsize=9)
    ax.set_ylabel("% of the capture window")
    ax.set_ylim(0, 115)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.set_title("GPU utilisation per stage (from the traces)", fontsize=11)
    return save(fig, path)


def gaps(df, path):
    """Mean GPU idle time per captured step, per stage."""
    return _bar(df.assign(gap=df["gap_per_step_ms"]), "gap", "GPU idle time per step (mean over the captured steps)", "ms per step",
                path, fmt="{:.0f}")


def dtoh(df, path, link_gbps=DEFAULT_LINK_GBPS):
    """DtoH time per copy and its GB/s per stage, against the host link; hatched: pageable memory."""
    d = df[df["dtoh_ms"].notna()]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 3.9))
    x = np.arange(len(d))
    hatches = ["" if m == "Pinned" else "//" for m in d["dtoh_memory"]]
    for ax, col, unit in ((a1, "dtoh_ms", "ms per copy"), (a2, "dtoh_gbps", "GB/s")):
        bars = ax.bar(x, d[col], color=[_color(s) for s in d["stage"]])
        for b, h, v in zip(bars, hatches, d[col]):
            b.set_hatch(h)
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x)
        ax.set_xticklabels(d["stage"], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(unit)
    a2.axhline(link_gbps, ls="--", lw=1, color="#333333")
    a2.text(-0.45, link_gbps * 1.02, f"link {link_gbps:g} GB/s", ha="left", va="bottom", fontsize=8)
    a2.set_ylim(0, link_gbps * 1.2)
    a1.set_yscale("log")
    a1.set_title("DtoH duration per output copy (log scale)", fontsize=10)
    a2.set_title("DtoH bandwidth (hatched = Pageable, solid = Pinned)", fontsize=10)
    return save(fig, path)


def overlap(df, path):
    """Share of each stage's DtoH copy time that overlapped kernels."""
    d = df.assign(ov=100 * df["dtoh_overlap"])
    return _bar(d, "ov", "Share of DtoH copy time that overlapped kernels", "%", path, fmt="{:.0f}%")


def timelines(items: list[tuple[str, object, object]], path):
    """One steady step per stage, stacked; each row on its own time scale (steps differ 20x), said in its title."""
    n = len(items)
    fig, axes = plt.subplots(n, 1, figsize=(12, 1.9 * n + 0.4))
    axes = np.atleast_1d(axes)
    for ax, (stage, analysis, trace) in zip(axes, items):
        st = analysis.tables.get("steps")
        if st is None or len(st) == 0:  # said, not dropped
            ax.set_axis_off()
            ax.text(0.0, 0.5, f"{stage}: no steps found in this trace (no NVTX range recurs with a counter), so no "
                    "step to draw", transform=ax.transAxes, fontsize=10, color=_color(stage), va="center")
            continue
        last = st.sort_values("start_ns").iloc[-1]
        nvtx = trace.host.nvtx
        tid = int(nvtx.loc[nvtx["name"] == last["name"], "global_tid"].iloc[0])
        # an asynchronous step's range ends before its GPU work: show one step period (1 / steps per second)
        rate = analysis.summary["steps"]["per_second"]
        period = int(1e9 / rate) if rate else int(last["duration_ns"])
        end = int(last["start_ns"]) + max(int(last["duration_ns"]), period)
        timeline(ax, trace.device.kernels_touching(int(last["start_ns"]), end), analysis.tables["memcpy"], nvtx,
                 int(last["start_ns"]), end, tid,
                 title=f"{stage}: {last['name']} (range {last['duration_ns'] / 1e6:,.0f} ms; "
                       f"step period {period / 1e6:,.0f} ms)   [its own time scale: 0 to {(end - int(last['start_ns'])) / 1e6:,.0f} ms]")
        ax.title.set_color(_color(stage))
    return save(fig, path, dpi=100)
