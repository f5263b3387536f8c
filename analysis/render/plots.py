"""Charts of one analysis (matplotlib, Agg). Plotting only: every number comes from the computed tables."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from nsys_transfer.nsys_core.contracts import (COMPUTE, COPY_TO_CPU, DEFAULT_LINK_GBPS, GET_BATCH,
                                               PROCESS_OUTPUT, QUEUE_OUTPUT)

from nsys_transfer.analysis.ranks import STRAGGLER_BELOW, SUMMARISE_OVER, spread, time_grid
from nsys_transfer.analysis.sections.breakdown import cause_label, time_breakdown

COLORS = {"kernel": "#4C72B0", "HtoD": "#55A868", "DtoH": "#C44E52", "DtoD": "#8172B2", "memset": "#937860",
          "idle": "#DDDDDD"}
# NVTX ranges are the CPU's phases: colours of their own, never a GPU kind's (a green 'get batch' read as HtoD)
NVTX_COLORS = {GET_BATCH: "#E9C46A", COMPUTE: "#B8A9D9", COPY_TO_CPU: "#F4A7B9", PROCESS_OUTPUT: "#CFC6A8",
               QUEUE_OUTPUT: "#F6BD8E"}
NVTX_DEFAULT = "#C9C9C9"
NVTX_OUTER = "#E3E3E3"  # depth 0: the step itself


def timeline(ax, kernels: pd.DataFrame, copies: pd.DataFrame, nvtx: pd.DataFrame, t0: int, t1: int,
             launch_tid: int | None = None, title: str = "", idle: list | None = None):
    """A row per stream (kernels and copies), a row of the GPU's idle gaps coloured by their cause (idle: (start,
    end, label) each), and rows for the launching thread's NVTX ranges, like nsys' view."""
    labels = []
    ms = lambda ns: (np.asarray(ns) - t0) / 1e6  # noqa: E731
    causes = list(dict.fromkeys(label for _, _, label in idle or []))
    if idle:
        for i, label in enumerate(causes):
            part = [(ms(a), (b - a) / 1e6) for a, b, lab in idle if lab == label]
            ax.broken_barh(part, (0, 0.8), color=_part_color(label, i), lw=0)
        labels.append("GPU idle: cause")
    k = kernels[(kernels["end_ns"] > t0) & (kernels["start_ns"] < t1)]
    c = copies[(copies["end_ns"] > t0) & (copies["start_ns"] < t1)]
    streams = sorted(set(k["stream"].tolist()) | set(c["stream"].tolist()))
    y = len(labels)
    for s in streams:
        ks = k[k["stream"] == s]
        ax.broken_barh(list(zip(ms(ks["start_ns"]), ks["duration_ns"] / 1e6)), (y, 0.8), color=COLORS["kernel"], lw=0)
        cs = c[c["stream"] == s]
        for kind, part in cs.groupby("copy_kind"):
            ax.broken_barh(list(zip(ms(part["start_ns"]), part["duration_ns"] / 1e6)), (y, 0.8),
                           color=COLORS.get(kind, "#333333"), lw=0)
        labels.append(f"stream {s}")
        y += 1
    if launch_tid is not None and len(nvtx):
        n = nvtx[(nvtx["global_tid"] == launch_tid) & (nvtx["end_ns"] > t0) & (nvtx["start_ns"] < t1)]
        for depth in sorted(n["depth"].unique())[:3]:
            nd = n[n["depth"] == depth]
            for r in nd.itertuples():
                col = NVTX_COLORS.get(r.name, NVTX_DEFAULT if depth else NVTX_OUTER)
                ax.broken_barh([(ms(max(r.start_ns, t0)), (min(r.end_ns, t1) - max(r.start_ns, t0)) / 1e6)],
                               (y, 0.8), facecolor=col, lw=0.5, edgecolor="#777777", hatch="///" if depth else None)
                width = (min(r.end_ns, t1) - max(r.start_ns, t0)) / (t1 - t0)
                if width > 0.06:
                    ax.text(ms((max(r.start_ns, t0) + min(r.end_ns, t1)) / 2), y + 0.4, r.name[:18], ha="center",
                            va="center", fontsize=7)
            labels.append(f"NVTX depth {depth}")
            y += 1
    ax.set_yticks(np.arange(len(labels)) + 0.4)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlim(0, (t1 - t0) / 1e6)
    ax.set_xlabel("time (ms)")
    ax.set_title(title, fontsize=10, loc="left")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[x]) for x in ("kernel", "HtoD", "DtoH")]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor=NVTX_DEFAULT, edgecolor="#777777", hatch="///"))
    handles += [plt.Rectangle((0, 0), 1, 1, color=_part_color(label, i)) for i, label in enumerate(causes)]
    ax.legend(handles, ["kernel", "HtoD", "DtoH", "NVTX range (CPU)", *causes], loc="lower right",
              bbox_to_anchor=(1.0, 1.0), fontsize=7, ncol=4 + min(len(causes), 3), frameon=False, borderaxespad=0.1)


def save(fig, path, dpi: int = 110):
    """Lay out, write and close a figure; returns the path."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def step_span(steps: pd.DataFrame, n: int = 3) -> tuple[int, int] | None:
    """(start, end) ns of the last n steps; None without steps."""
    if steps is None or len(steps) == 0:
        return None
    s = steps.sort_values("start_ns")
    first = max(0, len(s) - n)
    return int(s["start_ns"].iloc[first]), int(s["end_ns"].iloc[-1])


def plot_timeline(analysis, trace, path, n_steps: int = 3, title: str = ""):
    """Plot the timeline of the last n_steps steps (else the window) to path; None without a window."""
    tables, summ = analysis.tables, analysis.summary
    span = step_span(tables.get("steps"), n_steps)
    w = summ["window"]
    if span is None:
        if "duration_ns" not in w:
            return None
        span = (w["start_ns"], w["end_ns"])
    if "duration_ns" in w:
        span = (span[0], max(span[1], min(w["end_ns"], span[1] + (span[1] - span[0]))))
    tops = summ["gaps"]["top"]
    launch = None
    if len(trace.host.nvtx):
        if tops and tops[0].get("launch_tid") is not None:
            cand = trace.host.nvtx[(trace.host.nvtx["global_tid"] & 0xFFFFFF) == tops[0]["launch_tid"]]
            launch = int(cand["global_tid"].iloc[0]) if len(cand) else None
        if launch is None:
            launch = int(trace.host.nvtx["global_tid"].value_counts().idxmax())
    fig, ax = plt.subplots(figsize=(12, 3.9))
    timeline(ax, trace.device.kernels_touching(*span), tables["memcpy"], trace.host.nvtx, span[0], span[1], launch,
             title or f"timeline: last {n_steps} steps", idle_by_cause(analysis, span))
    return save(fig, path)


MAX_DRAWN_GAPS = 400  # the longest gaps of the span get a cause; the others are too thin to see


def idle_by_cause(analysis, span) -> list[tuple[int, int, str]]:
    """(start, end, label) of the first GPU's idle gaps in the span, each labelled by the cause holding most of it."""
    g = analysis.tables.get("gaps")
    if analysis.gap_causes is None or g is None or g.empty:
        return []
    dev = int(g["device"].iloc[0])
    g = g[(g["device"] == dev) & (g["end_ns"] > span[0]) & (g["start_ns"] < span[1])]
    g = g.nlargest(MAX_DRAWN_GAPS, "duration_ns")
    spans = [(max(int(a), span[0]), min(int(b), span[1])) for a, b in zip(g["start_ns"], g["end_ns"])]
    causes = analysis.gap_causes(dev, spans)
    return [(a, b, cause_label(c, subject)) for (a, b), (c, subject) in zip(spans, causes)]


def plot_gaps(analysis, path, title: str = ""):
    """Plot the GPU idle gaps over the window to path."""
    g = analysis.tables["gaps"]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if len(g):
        t0 = analysis.summary["window"]["start_ns"]
        ax.bar((g["start_ns"] - t0) / 1e6, g["duration_ns"] / 1e6, width=max(g["duration_ns"].max() / 1e6, 1) * 0.4,
               color=COLORS["idle"], edgecolor="#777777", align="edge")
        ax.set_xlabel("gap start (ms into the window)")
    else:
        ax.text(0.5, 0.5, "no idle gaps above the threshold", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("gap length (ms)")
    ax.set_title(title or f"GPU idle gaps >= {analysis.summary['gaps']['threshold_ns'] / 1e6:g} ms", fontsize=10)
    return save(fig, path)


def plot_dtoh(analysis, path, link_gbps: float = DEFAULT_LINK_GBPS, title: str = ""):
    """Plot each DtoH copy's duration and bandwidth (against the link speed) to path."""
    c = analysis.tables["memcpy"]
    d = c[c["copy_kind"] == "DtoH"].reset_index(drop=True)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.4))
    if len(d):
        colors = [COLORS["DtoH"] if k == "Pinned" else "#E8A0A0" for k in d["dst_kind"]]
        a1.bar(d.index, d["duration_ns"] / 1e6, color=colors)
        timed = d["gbps"].notna().to_numpy()  # a zero-length copy (a damaged export) has no bandwidth to draw
        a2.bar(d.index[timed], d["gbps"][timed], color=[c for c, ok in zip(colors, timed) if ok])
        a2.set_xlim(-0.6, len(d) - 0.4)
        a2.axhline(link_gbps, ls="--", color="#333333", lw=1)
        a2.text(-0.4, link_gbps * 1.02, f"link {link_gbps:g} GB/s", va="bottom", ha="left", fontsize=7)
        kinds = ", ".join(f"{k}: {v}" for k, v in d["dst_kind"].value_counts().items())
        a1.set_title(f"DtoH duration per copy ({kinds})", fontsize=10)
        a2.set_title("DtoH bandwidth per copy", fontsize=10)
        peak = d["gbps"].max()  # NaN when no copy has a duration (a damaged export): the link line sets the scale
        a2.set_ylim(0, max(link_gbps * 1.15, float(peak) * 1.1 if peak == peak else 0.0))
    else:
        a1.text(0.5, 0.5, "no DtoH copies", ha="center", va="center", transform=a1.transAxes)
    a1.set_xlabel("copy #")
    a1.set_ylabel("ms")
    a2.set_xlabel("copy #")
    a2.set_ylabel("GB/s")
    if title:
        fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_ranks(ranks, path, title: str = ""):
    """Several GPUs: per-GPU kernel and copy shares of their steps and DtoH GB/s (left); DtoH into host memory over
    time, stacked per GPU, against the shared capacity (right). With many GPUs (more than SUMMARISE_OVER) the bars
    carry no figures, every k-th GPU is named and the GPUs' bands have no legend (plot_rank_heatmap tells them apart).
    GPUs on several hosts: the right panel is the worst host's GPUs against its capacity."""
    d, host, hs = ranks.devices, ranks.host, ranks.summary["host_dtoh"]
    hosts = len(ranks.summary.get("hosts") or [])
    on_top = d["host"].map(lambda h: h == hs["host"]) if hosts else pd.Series(True, index=d.index)
    if hosts:
        host = host[host["host"].map(lambda h: h == hs["host"])]
    many = len(d) > SUMMARISE_OVER
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.6 if many else 4), gridspec_kw={"width_ratios": [1, 2]})
    x = np.arange(len(d))
    compute = pd.to_numeric(d["compute_utilization"], errors="coerce")  # NaN: a trace without a kernel table
    a1.bar(x - 0.2, 100 * compute.fillna(0), 0.4, color=COLORS["kernel"], label="kernels, % of steps")
    a1.bar(x + 0.2, 100 * d["dtoh_busy_share"], 0.4, color=COLORS["DtoH"], label="DtoH copies, % of steps")
    for i, (r, c) in enumerate([] if many else zip(d.itertuples(), compute)):
        a1.text(i - 0.2, 0 if pd.isna(c) else 100 * c, "n/a" if pd.isna(c) else f"{100 * c:.0f}", ha="center",
                va="bottom", fontsize=7)
        if r.dtoh_gbps is not None and r.dtoh_gbps == r.dtoh_gbps:
            a1.text(i + 0.2, 100 * r.dtoh_busy_share, f"{r.dtoh_gbps:.0f} GB/s", ha="center", va="bottom", fontsize=7)
    step = max(1, -(-len(d) // 16)) if many else 1
    a1.set_xticks(x[::step])
    a1.set_xticklabels(d["gpu"][::step], fontsize=6 if many else 8, rotation=90 if many else 0)
    a1.set_ylim(0, 118)
    a1.set_ylabel("% of the GPU's steps")
    a1.legend(fontsize=7, loc="upper right")
    a1.set_title("Per GPU", fontsize=10)
    if len(host):
        t0 = host["bin_start_ns"].min()
        piv = host.pivot_table(index="bin_start_ns", columns="gpu", values="gbps", aggfunc="sum").fillna(0)
        ms = (piv.index.to_numpy() - t0) / 1e6
        a2.stackplot(ms, *[piv[c].to_numpy() for c in piv.columns], step="post",
                     labels=[f"{len(piv.columns)} GPUs, one band each"] + [None] * (len(piv.columns) - 1) if many
                     else list(piv.columns),
                     colors=["#C44E52", "#DD8452", "#CCB974", "#8172B2", "#64B5CD", "#55A868", "#937860", "#4C72B0"][
                         :len(piv.columns)], alpha=0.85)
        # each rank's drain: its outputs still queued after its last step's copy (trace clock -> common clock)
        shift = {t["label"]: t["clock_offset_ns"] for t in ranks.summary["traces"]}
        # not a rate: shaded behind the GB/s, named in the legend
        for i, r in enumerate(d[on_top].itertuples()):
            if r.drain_ns and r.drain_ns > 0:
                end = (r.window_start_ns + r.window_ns + shift.get(r.trace, 0) - t0) / 1e6
                a2.axvspan(end, end + r.drain_ns / 1e6, color="#999999", alpha=0.12, lw=0,
                           label="a GPU's outputs still draining (time only)" if i == 0 else None)
        a2.axhline(hs["capacity_gbps"], ls="--", lw=1, color="#333333")
        a2.text(ms[0], hs["capacity_gbps"] * 1.02, f"shared capacity {hs['capacity_gbps']:.0f} GB/s "
                f"({hs['capacity_source']})", fontsize=7, va="bottom")
        a2.set_ylim(0, max(hs["capacity_gbps"], hs["peak_gbps"]) * 1.2)
        a2.legend(fontsize=7, loc="center right")
    a2.set_xlabel("ms")
    a2.set_ylabel(f"GB/s ({hs['bin_ns'] / 1e6:g} ms bins)")
    a2.set_title(f"DtoH into host memory on {hs['host'] or 'the unnamed host'}, the worst of {hosts} hosts (stacked)"
                 if hosts else "DtoH into host memory, all GPUs (stacked)", fontsize=10)
    fig.suptitle((title + ": " if title else "") + ranks.summary["limit"]["rule"], fontsize=11)
    return save(fig, path)


def plot_rank_heatmap(ranks, path, title: str = "", columns: int = 600):
    """Many GPUs over time (ranks.time_grid): each GPU's busy share per time bin over its own steps (top; blank
    outside them) and its DtoH into host memory in GB/s (bottom), one row per GPU, on the common clock. Rows are
    named (every one up to 64, else every k-th), the stragglers always, in red."""
    g = time_grid(ranks, columns)
    n = len(g.gpus)
    ms = (g.edges_ns - g.edges_ns[0]) / 1e6
    late = {s["gpu"] for s in spread(ranks.summary["gpus"])["slowest"] if s["straggler"]}
    step = max(1, -(-n // 64))
    named = [i for i in range(n) if i % step == 0 or g.gpus[i] in late]
    fig, axes = plt.subplots(2, 1, figsize=(13, 2 * (0.9 + (0.14 if n > 16 else 0.3) * n) + 0.5), sharex=True)
    top = max(float(np.nanmax(g.dtoh_gbps)) if g.dtoh_gbps.size else 0.0, 1e-9)
    head = (title + ": " if title else "") + f"{n} GPUs; limit: {ranks.summary['limit']['rule']}. "
    panels = ((np.ma.masked_invalid(100 * g.busy), "viridis", 100, head + "GPU busy, % of the bin (blank: outside "
               "the GPU's steps)"),
              (g.dtoh_gbps, "magma", top, "DtoH into host memory, GB/s"
               + (f" (red: stragglers, > {STRAGGLER_BELOW:.0%} below the median steps/s)" if late else "")))
    for ax, (values, cmap, hi, label) in zip(axes, panels):
        mesh = ax.pcolormesh(ms, np.arange(n + 1), values, cmap=cmap, vmin=0, vmax=hi, shading="flat")
        ax.set_ylim(n, 0)
        ax.set_yticks(np.asarray(named) + 0.5)
        ax.set_yticklabels([g.gpus[i] for i in named], fontsize=6 if n > 16 else 8)
        for tick, i in zip(ax.get_yticklabels(), named):
            if g.gpus[i] in late:
                tick.set_color("#C00000")
                tick.set_fontweight("bold")
        ax.set_title(label, fontsize=10)
        fig.colorbar(mesh, ax=ax, pad=0.01, fraction=0.03)
    bin_ms = (g.edges_ns[1] - g.edges_ns[0]) / 1e6 if len(g.edges_ns) > 1 else 0
    axes[1].set_xlabel(f"ms from the first trace's start (common clock; {bin_ms:g} ms bins)")
    if len(g.hosts) > 1:
        _mark_hosts(fig, axes, g.hosts, 6 if n > 16 else 8)
    return save(fig, path)


def _mark_hosts(fig, axes, hosts: list, fontsize: int):
    """GPUs on several hosts (RankGrid.hosts, their rows one block per host): a line between two hosts' rows and
    each host's name left of its GPUs' names (every k-th host beyond 64)."""
    fig.canvas.draw()  # the GPUs' tick labels' widths, to set the host names beside them
    step = max(1, -(-len(hosts) // 64))
    for ax in axes:
        for _, first, _ in hosts[1:]:
            ax.axhline(first, color="black", lw=2.2)
            ax.axhline(first, color="white", lw=0.9)
        width = max((t.get_window_extent().width for t in ax.get_yticklabels()), default=0) * 72 / fig.dpi
        for i, (name, first, end) in enumerate(hosts):
            if i % step == 0:
                ax.annotate(name or "unnamed host", xy=(0, (first + end) / 2), xycoords=("axes fraction", "data"),
                            xytext=(-width - 8, 0), textcoords="offset points", ha="right", va="center",
                            fontsize=fontsize + 1, fontweight="bold", color="#333333")


BREAKDOWN_COLORS = {"kernels": COLORS["kernel"], "idle: input-bound": "#2EC4B6", "idle: host-sync": "#E76F51",
                    "idle: launches": "#F4A261", "idle: memory mapping": "#8D99AE", "idle: communication": "#264653",
                    "idle: sleeping": "#BDB2FF", "idle: CPU work, no range": "#A8A8A8", "idle: other": COLORS["idle"]}


def _part_color(label: str, i: int) -> str:
    if label in BREAKDOWN_COLORS:
        return BREAKDOWN_COLORS[label]
    for kind in ("HtoD", "DtoH", "DtoD"):
        if label.startswith(kind):
            return COLORS[kind] if "Pageable" not in label else {"HtoD": "#9FD3A9", "DtoH": "#E8A0A2"}.get(kind, "#BBB")
    return plt.cm.tab20(i % 20)  # an NVTX range the idle time sat in


def plot_breakdown(summaries: list, labels: list, path, title: str = ""):
    """One stacked bar per trace: the share of the GPUs' time in each part of analysis.breakdown.time_breakdown."""
    rows = [time_breakdown(s) for s in summaries]
    names = list(dict.fromkeys(label for r in rows for label, _ in r))
    fig, ax = plt.subplots(figsize=(11, 1.4 + 0.6 * max(len(rows), len(names) / 4)))
    for y, r in enumerate(rows):
        total, left = sum(ns for _, ns in r) or 1, 0.0
        for label, ns in r:
            share = 100 * ns / total
            ax.barh(y, share, left=left, color=_part_color(label, names.index(label)), edgecolor="white")
            if share >= 6:
                ax.text(left + share / 2, y, f"{share:.0f}%", ha="center", va="center", fontsize=7)
            left += share
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the GPUs' time in the window (%)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=_part_color(n, i)) for i, n in enumerate(names)]
    ax.legend(handles, names, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    ax.set_title(title or "where the GPU's time went", fontsize=10)
    return save(fig, path)
