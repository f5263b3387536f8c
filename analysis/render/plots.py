"""Charts of one analysis (matplotlib, each on its own Agg canvas: render/figure.py). Plotting only: every number
comes from the computed tables. Each chart is a function that returns its figure (the Python API's charts, None where
it would show nothing) and one that writes it (analyze-trace --plots, the reports), the same drawing."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from ...nsys_core.contracts import DEFAULT_LINK_GBPS

from . import palette
from .figure import Chart, new, save
from ..common.typed_json import ABSENT
from ..document import Document
from ..document.breakdown import time_breakdown
from ..result import Result
from ..sections.breakdown import cause_label

LINK_COLOR = "#333333"


def swatch(key: str, **kw):
    """A legend's swatch of a palette key (every chart's legends)."""
    return Rectangle((0, 0), 1, 1, facecolor=palette.color(key), lw=0, **kw)


def _copy_keys(copies: pd.DataFrame) -> pd.Series:
    """Each copy's palette key: its direction and its host memory kind."""
    if copies.empty:
        return pd.Series([], dtype=object, index=copies.index)
    return pd.Series([palette.copy_key(k, palette.host_memory(k, s, d)) for k, s, d in
                      zip(copies["copy_kind"], copies["src_kind"], copies["dst_kind"])], index=copies.index, dtype=object)


def timeline(ax, kernels: pd.DataFrame, copies: pd.DataFrame, nvtx: pd.DataFrame, t0: int, t1: int,
             launch_tid: int | None = None, title: str = "", idle: list | None = None):
    """A row per stream (kernels and copies), a row of the GPU's idle gaps coloured by their cause (idle: (start,
    end, label) each; an NVTX range's name written on its wide gaps), and rows for the launching thread's NVTX
    ranges, like nsys' view. Colours: the palette's; the legend names what is drawn (at most palette.MAX_LEGEND)."""
    ms = lambda ns: (np.asarray(ns) - t0) / 1e6  # noqa: E731
    k = kernels[(kernels["end_ns"] > t0) & (kernels["start_ns"] < t1)]
    c = copies[(copies["end_ns"] > t0) & (copies["start_ns"] < t1)]
    ckeys = _copy_keys(c)
    n = nvtx[(nvtx["global_tid"] == launch_tid) & (nvtx["end_ns"] > t0) & (nvtx["start_ns"] < t1)] \
        if launch_tid is not None and len(nvtx) else nvtx.iloc[0:0]
    weights: dict[str, float] = {}
    if len(k):
        weights["compute"] = float(k["duration_ns"].sum())
    for key, part in c.groupby(ckeys.to_numpy()) if len(c) else ():
        weights[key] = float(part["duration_ns"].sum())
    for a, b, label in idle or []:
        key = palette.part_key(label)
        weights[key] = weights.get(key, 0.0) + (b - a)
    named, folded = palette.legend_keys(weights, palette.MAX_LEGEND - (1 if len(n) else 0))
    shown = lambda key: "other" if key in folded else key  # noqa: E731
    labels = []
    if idle:
        by_key: dict[str, list] = {}
        for a, b, label in idle:
            by_key.setdefault(shown(palette.part_key(label)), []).append((ms(a), (b - a) / 1e6))
            if palette.part_key(label) == "cpu-range" and (b - a) / (t1 - t0) > 0.06 and label.startswith("idle: in "):
                ax.text(ms((a + b) / 2), 0.4, label[len("idle: in "):][:20], ha="center", va="center", fontsize=7,
                        color="white")
        for key, part in by_key.items():
            ax.broken_barh(part, (0, 0.8), color=palette.color(key), lw=0)
        labels.append("GPU idle: cause")
    streams = sorted(set(k["stream"].tolist()) | set(c["stream"].tolist()))
    y = len(labels)
    for s in streams:
        ks = k[k["stream"] == s]
        ax.broken_barh(list(zip(ms(ks["start_ns"]), ks["duration_ns"] / 1e6)), (y, 0.8),
                       color=palette.color(shown("compute")), lw=0)
        on = (c["stream"] == s).to_numpy()
        for key, part in c[on].groupby(ckeys[on].to_numpy()):
            ax.broken_barh(list(zip(ms(part["start_ns"]), part["duration_ns"] / 1e6)), (y, 0.8),
                           color=palette.color(shown(key)), lw=0)
        labels.append(f"stream {s}")
        y += 1
    labels += _nvtx_rows(ax, n, y, t0, t1)
    _finish(ax, labels, t1 - t0, title, named, bool(len(n)))


def _nvtx_rows(ax, n: pd.DataFrame, y: int, t0: int, t1: int) -> list[str]:
    """The launching thread's NVTX ranges from row y up, a row per depth (the first three), named where wide; their
    rows' labels."""
    labels = []
    for depth in sorted(n["depth"].unique())[:3] if len(n) else []:
        for r in n[n["depth"] == depth].itertuples():
            a, b = max(r.start_ns, t0), min(r.end_ns, t1)
            ax.broken_barh([((a - t0) / 1e6, (b - a) / 1e6)], (y, 0.8), facecolor=palette.NVTX_COLOR if depth else
                           palette.NVTX_OUTER, lw=0.5, edgecolor="#777777", hatch="///" if depth else None)
            if (b - a) / (t1 - t0) > 0.06:  # the name, as much of it as the bar holds (~6 px a letter at 7 pt)
                ax.text(((a + b) / 2 - t0) / 1e6, y + 0.4, r.name[:int(170 * (b - a) / (t1 - t0))], ha="center",
                        va="center", fontsize=7, bbox={"facecolor": "white", "alpha": 0.7, "lw": 0, "pad": 1})
        labels.append(f"NVTX depth {depth}")
        y += 1
    return labels


def _finish(ax, labels: list[str], span_ns: int, title: str, named: list[str], nvtx: bool) -> None:
    """The rows' labels, the axes, the title and the legend (what is drawn, and the NVTX ranges where there are)."""
    ax.set_yticks(np.arange(len(labels)) + 0.4)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlim(0, span_ns / 1e6)
    ax.set_ylim(-0.1, max(len(labels), 1) - 0.1)
    ax.set_xlabel("time (ms)")
    ax.set_title(title, fontsize=10, loc="left")
    handles = [swatch(key) for key in named]
    names = [palette.key_label(key) for key in named]
    if nvtx:
        handles.append(Rectangle((0, 0), 1, 1, facecolor=palette.NVTX_COLOR, edgecolor="#777777", hatch="///"))
        names.append("NVTX range (CPU)")
    ax.legend(handles, names, loc="center left", bbox_to_anchor=(1.005, 0.5), fontsize=7, frameon=False)


def _written(fig: Chart | None, path):
    """Write a chart to path (save); None, nothing written, where there is no chart."""
    return None if fig is None else save(fig, path)


def step_span(steps: pd.DataFrame, n: int = 3) -> tuple[int, int] | None:
    """(start, end) ns of the last n steps; None without steps."""
    if steps is None or len(steps) == 0:
        return None
    s = steps.sort_values("start_ns")
    first = max(0, len(s) - n)
    return int(s["start_ns"].iloc[first]), int(s["end_ns"].iloc[-1])


def timeline_span(analysis: Result, n_steps: int = 3) -> tuple[tuple[int, int], str] | None:
    """(span, what it is in words) of the timeline: the last n_steps steps and as long again after them, or on to the
    end of the last copy they made where that is later, within the window (an asynchronous step's GPU work runs on
    past its range), else the window; None without a window."""
    steps, w = analysis.tables.get("steps"), analysis.doc.window
    span = step_span(steps, n_steps)
    if span is None:
        if w.duration_ns is ABSENT:
            return None
        return (w.start_ns, w.end_ns), f"the analysed window, {w.duration_ns / 1e6:,.0f} ms (no steps found)"
    s = steps.sort_values("start_ns")
    k = min(n_steps, len(s))
    names = f"'{s['name'].iloc[-k]}' ... '{s['name'].iloc[-1]}'" if k > 1 else f"'{s['name'].iloc[-1]}'"
    what = (f"all {k} steps" if k == len(s) else f"the last {k} of {len(s)} steps") + f" ({names})"
    end = span[1]
    if w.duration_ns is not ABSENT:
        end = max(span[1], min(w.end_ns, span[1] + (span[1] - span[0])))
    copies_end = launched_copies_end(analysis.tables.get("memcpy"), span)
    if copies_end > end:  # "all 3 steps" holds their copies: an asynchronous step's land long after its range
        end = min(copies_end, copies_end if w.end_ns is ABSENT else w.end_ns)
        return (span[0], end), what + f" and the {(end - span[1]) / 1e6:,.0f} ms after them, to their last copy's end"
    if end > span[1]:
        what += f" and the {(end - span[1]) / 1e6:,.0f} ms after them"
    return (span[0], end), what


def launched_copies_end(copies: pd.DataFrame | None, span: tuple[int, int]) -> int:
    """The end (ns) of the last copy whose CUDA call was made in the span; the span's start without one."""
    if copies is None or copies.empty or "api_start_ns" not in copies:
        return span[0]
    ends = copies.loc[(copies["api_start_ns"] >= span[0]) & (copies["api_start_ns"] < span[1]), "end_ns"]
    return int(ends.max()) if len(ends) else span[0]


def plot_timeline(analysis: Result, trace, path, n_steps: int = 3, name: str = ""):
    """Write timeline_figure to path; None (nothing written) without a window."""
    return _written(timeline_figure(analysis, trace, n_steps, name), path)


def timeline_figure(analysis: Result, trace, n_steps: int = 3, name: str = "") -> Chart | None:
    """The timeline of the last n_steps steps (else the window), titled by what it draws ('name: the last 3 of 12
    steps (...)'); trace: the analysed trace, open (its kernels and NVTX ranges are drawn); None without a window."""
    got = timeline_span(analysis, n_steps)
    if got is None:
        return None
    span, what = got
    tops = analysis.doc.gaps.top
    launch = None
    if len(trace.host.nvtx):
        if tops and tops[0].launch_tid is not None:
            cand = trace.host.nvtx[(trace.host.nvtx["global_tid"] & 0xFFFFFF) == tops[0].launch_tid]
            launch = int(cand["global_tid"].iloc[0]) if len(cand) else None
        if launch is None:
            launch = int(trace.host.nvtx["global_tid"].value_counts().idxmax())
    fig, ax = new((12, 3.9))
    timeline(ax, trace.device.kernels_touching(*span), analysis.tables["memcpy"], trace.host.nvtx, span[0], span[1],
             launch, f"{name}: {what}" if name else what, idle_by_cause(analysis, span))
    return fig


MAX_DRAWN_GAPS = 400  # the longest gaps of the span get a cause; the others are too thin to see
MAX_GAPS_BY_CAUSE = 5000  # the gaps chart: the longest gaps of each GPU whose cause is looked up


def idle_by_cause(analysis: Result, span, device: int | None = None, limit: int = MAX_DRAWN_GAPS) -> list[tuple[int, int, str]]:
    """(start, end, label) of a GPU's idle gaps in the span (the first GPU's unless device is given), each labelled
    by the cause holding most of it; the `limit` longest."""
    g = analysis.tables.get("gaps")
    if analysis.gap_causes is None or g is None or g.empty:
        return []
    dev = int(g["device"].iloc[0]) if device is None else device
    g = g[(g["device"] == dev) & (g["end_ns"] > span[0]) & (g["start_ns"] < span[1])]
    g = g.nlargest(limit, "duration_ns")
    spans = [(max(int(a), span[0]), min(int(b), span[1])) for a, b in zip(g["start_ns"], g["end_ns"])]
    causes = analysis.gap_causes(dev, spans)
    return [(a, b, cause_label(c, subject)) for (a, b), (c, subject) in zip(spans, causes)]


def plot_gaps(analysis: Result, path, name: str = ""):
    """Write gaps_figure to path; None (nothing written) without gaps above the threshold."""
    return _written(gaps_figure(analysis, name), path)


def gaps_figure(analysis: Result, name: str = "") -> Chart | None:
    """The GPU idle gaps over the window, each drawn to scale: from its start to its end (width) and as tall as it
    is long, coloured by its cause; None without gaps above the threshold."""
    g = analysis.tables["gaps"]
    if g is None or g.empty:
        return None
    w = analysis.doc.window
    t0 = w.start_ns
    drawn = [x for dev in sorted(g["device"].unique())
             for x in idle_by_cause(analysis, (t0, w.end_ns), int(dev), MAX_GAPS_BY_CAUSE)]
    if len(drawn) < len(g):  # beyond the longest (or no idle attribution): drawn, their cause not looked up
        known = {(a, b) for a, b, _ in drawn}
        drawn += [(int(a), int(b), "idle: other") for a, b in zip(g["start_ns"], g["end_ns"]) if (a, b) not in known]
    weights: dict[str, float] = {}
    for a, b, label in drawn:
        weights[palette.part_key(label)] = weights.get(palette.part_key(label), 0.0) + (b - a)
    named, folded = palette.legend_keys(weights)
    fig, ax = new((9, 3.2))
    for a, b, label in drawn:
        key = palette.part_key(label)
        ax.bar((a - t0) / 1e6, (b - a) / 1e6, width=(b - a) / 1e6, align="edge", lw=0,
               color=palette.color("other" if key in folded else key))
    ax.set_xlim(0, w.duration_ns / 1e6 if w.duration_ns else None)
    ax.set_xlabel("ms into the window (each gap drawn from its start to its end)")
    ax.set_ylabel("gap length (ms)")
    s = analysis.doc.gaps
    what = (f"GPU idle gaps >= {s.threshold_ns / 1e6:g} ms: {s.count:,}, {s.total_ns / 1e6:,.1f} ms in all "
            f"({len(drawn):,} drawn, by cause)")
    ax.set_title(f"{name}: {what}" if name else what, fontsize=10)
    ax.legend([swatch(k) for k in named], [palette.key_label(k) for k in named], fontsize=7, loc="center left",
              bbox_to_anchor=(1.005, 0.5), frameon=False)
    return fig


def link_words(source: str | None) -> str:
    """What the link line stands for, from the analysis's trace.link.source: the PCIe nominal (85% of the raw rate,
    what pinned copies typically reach, so a fast one runs above it) or the trace's own fastest pinned copy, on two
    lines."""
    source = source or ""
    if source.startswith("PCIe"):
        return source + ":\n85% of the raw rate, what pinned copies typically reach; a good link runs faster"
    return source.replace(" (", "\n(", 1)


def draw_link(ax, gbps: float, words: str, title: str) -> None:
    """The host link's dashed line on a GB/s axis, named beside it, and what the figure is (words) in small type
    under the axes' title."""
    ax.axhline(gbps, ls="--", color=LINK_COLOR, lw=1)
    ax.text(0.01, gbps * 1.01, f"link {gbps:g} GB/s", va="bottom", ha="left", fontsize=7,
            transform=ax.get_yaxis_transform())
    ax.set_title(title, fontsize=10, pad=6 + 9 * (words.count("\n") + 1) if words else 6)
    if words:
        ax.text(0.5, 1.01, words, transform=ax.transAxes, ha="center", va="bottom", fontsize=6.5, color="#444444")


def plot_dtoh(analysis: Result, path, link_gbps: float | None = DEFAULT_LINK_GBPS, name: str = ""):
    """Write dtoh_figure to path; None (nothing written) without DtoH copies."""
    return _written(dtoh_figure(analysis, link_gbps, name), path)


def dtoh_figure(analysis: Result, link_gbps: float | None = DEFAULT_LINK_GBPS, name: str = "") -> Chart | None:
    """Each DtoH copy's duration and bandwidth (against the link speed, with what that figure is), coloured by host
    memory kind; None without DtoH copies."""
    c = analysis.tables["memcpy"]
    d = c[c["copy_kind"] == "DtoH"].reset_index(drop=True)
    if d.empty:
        return None
    keys = _copy_keys(d)
    colors = [palette.color(k) for k in keys]
    fig, (a1, a2) = new((11, 3.6), 1, 2)
    a1.bar(d.index, d["duration_ns"] / 1e6, color=colors, lw=0)
    a1.set_ylim(0, float(d["duration_ns"].max()) / 1e6 * 1.25 or 1)  # room for the legend
    timed = d["gbps"].notna().to_numpy()  # a zero-length copy (a damaged export) has no bandwidth to draw
    a2.bar(d.index[timed], d["gbps"][timed], color=[c for c, ok in zip(colors, timed) if ok], lw=0)
    a2.set_xlim(-0.6, len(d) - 0.4)
    peak = d["gbps"].max()  # NaN when no copy has a duration (a damaged export): the link line sets the scale
    top = float(peak) * 1.1 if peak == peak else 0.0
    if link_gbps:
        draw_link(a2, link_gbps, link_words(analysis.doc.trace.link.source), "DtoH bandwidth per copy")
        top = max(top, link_gbps * 1.2)
    a2.set_ylim(0, top or 1)
    kinds = ", ".join(f"{k}: {v}" for k, v in d["dst_kind"].value_counts().items())
    a1.set_title(f"DtoH duration per copy ({kinds})", fontsize=10)
    if not link_gbps:
        a2.set_title("DtoH bandwidth per copy", fontsize=10)
    for ax, unit in ((a1, "ms"), (a2, "GB/s")):
        ax.set_xlabel("copy # (in time order)")
        ax.set_ylabel(unit)
        ax.xaxis.get_major_locator().set_params(integer=True)
    used = list(dict.fromkeys(keys))
    a1.legend([swatch(k) for k in used], [palette.key_label(k) for k in used], fontsize=7, loc="upper right", ncol=2)
    if name:
        fig.suptitle(name, fontsize=10)
    return fig


def plot_breakdown(docs: Sequence[Document], labels: list, path, title: str = ""):
    """Write breakdown_figure to path; None (nothing written) when no trace has GPU time to share out."""
    return _written(breakdown_figure(docs, labels, title), path)


def breakdown_figure(docs: Sequence[Document], labels: list, title: str = "") -> Chart | None:
    """One stacked bar per trace: the share of the GPUs' time in each part of document/breakdown.time_breakdown,
    coloured by the palette (an NVTX range's idle time is cpu-range's colour, its name on the bar); the legend names
    at most palette.MAX_LEGEND colours, the smallest parts beyond them drawn as 'other'. None when no trace has GPU
    time to share out."""
    rows = [time_breakdown(d) if d.gpu else [] for d in docs]  # no GPU activity: no time to share out
    if not any(rows):
        return None
    weights: dict[str, float] = {}
    for r in rows:
        total = sum(ns for _, ns in r) or 1
        for label, ns in r:
            weights[palette.part_key(label)] = weights.get(palette.part_key(label), 0.0) + ns / total
    named, folded = palette.legend_keys(weights)
    fig, ax = new((11, 1.5 + 0.6 * max(len(rows), len(named) / 4)))
    for y, r in enumerate(rows):
        total, left = sum(ns for _, ns in r) or 1, 0.0
        for label, ns in r:
            share, key = 100 * ns / total, palette.part_key(label)
            ax.barh(y, share, left=left, color=palette.color("other" if key in folded else key), edgecolor="white")
            if share >= 6:
                text = f"{share:.0f}%" if key != "cpu-range" or not label.startswith("idle: in ") else \
                    f"{label[len('idle: in '):][:24]} {share:.0f}%"
                ax.text(left + share / 2, y, text, ha="center", va="center", fontsize=7,
                        color="white" if key in DARK else "black")
            left += share
        if not r:
            ax.text(1, y, "no GPU time in this trace", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the GPUs' time in the window (%)")
    ax.legend([swatch(k) for k in named], [palette.key_label(k) for k in named], loc="center left",
              bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    ax.set_title(title or "where the GPU's time went", fontsize=10)
    return fig


DARK = {"compute", "comm-wait", "mapping", "cpu-range", "DtoH", "DtoD"}  # keys whose bars take white text
