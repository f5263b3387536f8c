"""Charts of several GPUs (the GPUs side by side, analysis/rank_summary.Ranks): each GPU's kernel and copy shares
beside the host-side DtoH they share over time (ranks_figure), and many GPUs over time as a heat map
(rank_heatmap_figure). Plotting only: every number comes from the computed tables (and render/many_gpus.py). Each
chart returns its figure (render/figure.py) and has a writer (plot_ranks, plot_rank_heatmap), saved through
plots.save, the one place a chart is written."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..rank_summary import Ranks
from . import palette, plots
from .figure import Chart, new
from .many_gpus import STRAGGLER_BELOW, SUMMARISE_OVER, spread, time_grid

GPU_HATCHES = ["", "////", "....", "\\\\\\\\", "xxxx", "++++", "oo", "----"]  # the GPUs' bands of the stacked DtoH chart


def plot_ranks(ranks: Ranks, path, title: str = ""):
    """Write ranks_figure to path."""
    return plots.save(ranks_figure(ranks, title), path)


def ranks_figure(ranks: Ranks, title: str = "") -> Chart:
    """Several GPUs: per-GPU kernel and copy shares of their steps and DtoH GB/s (left); DtoH into host memory over
    time, stacked per GPU, against the shared capacity (right; left out, and said in the title, when no GPU copied to
    the host). With many GPUs (more than SUMMARISE_OVER) the bars carry no figures, every k-th GPU is named and the
    GPUs' bands have no legend (plot_rank_heatmap tells them apart). GPUs on several hosts: the right panel is the
    worst host's GPUs against its capacity."""
    d, host, hs = ranks.devices, ranks.host, ranks.part.host_dtoh
    hosts = len(ranks.part.hosts or ())
    if hosts:
        host = host[host["host"].map(lambda h: h == hs.host)]
    many = len(d) > SUMMARISE_OVER
    if len(host):
        fig, (a1, a2) = new((13, 4.6 if many else 4), 1, 2, gridspec_kw={"width_ratios": [1, 2]})
    else:
        fig, a1 = new((7, 4.9 if many else 4.3))
    key = _per_gpu(a1, d, many)
    if len(host):
        _host_dtoh(a2, ranks, host, hosts, key, many)
    head = (title + ": " if title else "") + ranks.part.limit.rule
    fig.suptitle(head if len(host) else head + "\nno DtoH copy into host memory: no host-side panel", fontsize=11)
    return fig


def _per_gpu(ax, d: pd.DataFrame, many: bool) -> str:
    """The per-GPU bars of plot_ranks: kernels and DtoH share of each GPU's steps, the DtoH bar in its copies' host
    memory kind (most of their bytes pinned: the pinned colour); returns the key most GPUs' copies have."""
    x = np.arange(len(d))
    compute = pd.to_numeric(d["compute_utilization"], errors="coerce")  # NaN: a trace without a kernel table
    ax.bar(x - 0.2, 100 * compute.fillna(0), 0.4, color=palette.color("compute"))
    shares = d["dtoh_pinned_share"] if "dtoh_pinned_share" in d else pd.Series([1.0] * len(d))
    keys = ["DtoH" if s is None or s != s or s >= 0.5 else "DtoH/Pageable" for s in shares]
    ax.bar(x + 0.2, 100 * d["dtoh_busy_share"], 0.4, color=[palette.color(k) for k in keys])
    used = [k for k, b in zip(keys, d["dtoh_busy_share"]) if b and b == b]  # the GPUs that copied
    copied = list(dict.fromkeys(used))
    ax.legend([plots.swatch("compute"), *map(plots.swatch, copied)],
              ["kernels, % of steps", *(f"{palette.key_label(k)}, % of steps" for k in copied)], fontsize=7,
              loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)  # below: never on a bar
    for i, (r, c) in enumerate([] if many else zip(d.itertuples(), compute)):
        ax.text(i - 0.2, 0 if pd.isna(c) else 100 * c, "n/a" if pd.isna(c) else f"{100 * c:.0f}", ha="center",
                va="bottom", fontsize=7)
        if r.dtoh_busy_share == r.dtoh_busy_share:  # each bar labelled with its own height; the rate under the GPU
            ax.text(i + 0.2, 100 * r.dtoh_busy_share, f"{100 * r.dtoh_busy_share:.0f}", ha="center", va="bottom",
                    fontsize=7)
    step = max(1, -(-len(d) // 16)) if many else 1
    ax.set_xticks(x[::step])
    ax.set_xticklabels(d["gpu"][::step] if many else [_gpu_tick(r) for r in d.itertuples()],
                       fontsize=6 if many else 8, rotation=90 if many else 0)
    ax.set_ylim(0, 118)
    ax.set_ylabel("% of the GPU's steps")
    ax.set_title("Per GPU", fontsize=10)
    return max(copied, key=used.count) if copied else "DtoH"


def _gpu_tick(r) -> str:
    """A GPU's tick label: its name, and its DtoH rate where it copied (a rate, not the bar's height)."""
    rate = r.dtoh_gbps is not None and r.dtoh_gbps == r.dtoh_gbps
    return f"{r.gpu}\nDtoH {r.dtoh_gbps:.0f} GB/s" if rate else str(r.gpu)


def _host_dtoh(ax, ranks: Ranks, host: pd.DataFrame, hosts: int, key: str, many: bool) -> None:
    """plot_ranks' right panel: DtoH into host memory over time, a band per GPU in the copies' colour (told apart by
    hatches), each rank's drain shaded, against the shared capacity."""
    d, hs = ranks.devices, ranks.part.host_dtoh
    on_top = d["host"].map(lambda h: h == hs.host) if hosts else pd.Series(True, index=d.index)
    t0 = host["bin_start_ns"].min()
    piv = host.pivot_table(index="bin_start_ns", columns="gpu", values="gbps", aggfunc="sum").fillna(0)
    ms = (piv.index.to_numpy() - t0) / 1e6
    bands = ax.stackplot(ms, *[piv[c].to_numpy() for c in piv.columns], step="post",
                         labels=[f"{len(piv.columns)} GPUs, one band each"] + [None] * (len(piv.columns) - 1) if many
                         else list(piv.columns), colors=[palette.color(key)] * len(piv.columns), edgecolor="white",
                         lw=0.3)
    for i, band in enumerate(bands):  # the copies' one colour; each GPU's band told by its hatch
        band.set_hatch(GPU_HATCHES[i % len(GPU_HATCHES)])
    # each rank's drain: its outputs still queued after its last step's copy (trace clock -> common clock)
    shift = {t.label: t.clock_offset_ns for t in ranks.part.traces}
    # not a rate: shaded behind the GB/s, named in the legend
    for i, r in enumerate(d[on_top].itertuples()):
        if r.drain_ns and r.drain_ns > 0:
            end = (r.window_start_ns + r.window_ns + shift.get(r.trace, 0) - t0) / 1e6
            ax.axvspan(end, end + r.drain_ns / 1e6, color="#999999", alpha=0.12, lw=0,
                       label="a GPU's outputs still draining (time only)" if i == 0 else None)
    ax.axhline(hs.capacity_gbps, ls="--", lw=1, color="#333333")
    ax.text(ms[0], hs.capacity_gbps * 1.02, f"shared capacity {hs.capacity_gbps:.0f} GB/s ({hs.capacity_source})",
            fontsize=7, va="bottom")
    ax.set_ylim(0, max(hs.capacity_gbps, hs.peak_gbps) * 1.2)
    ax.legend(fontsize=7, loc="center right")
    ax.set_xlabel("ms")
    ax.set_ylabel(f"GB/s ({hs.bin_ns / 1e6:g} ms bins)")
    ax.set_title(f"DtoH into host memory on {hs.host or 'the unnamed host'}, the worst of {hosts} hosts (stacked)"
                 if hosts else "DtoH into host memory, all GPUs (stacked)", fontsize=10)


def plot_rank_heatmap(ranks: Ranks, path, title: str = "", columns: int = 600):
    """Write rank_heatmap_figure to path."""
    return plots.save(rank_heatmap_figure(ranks, title, columns), path)


def rank_heatmap_figure(ranks: Ranks, title: str = "", columns: int = 600) -> Chart:
    """Many GPUs over time (ranks.time_grid): each GPU's busy share per time bin over its own steps (top; blank
    outside them) and its DtoH into host memory in GB/s (bottom), one row per GPU, on the common clock. Rows are
    named (every one up to 64, else every k-th), the stragglers always, in red."""
    g = time_grid(ranks, columns)
    n = len(g.gpus)
    ms = (g.edges_ns - g.edges_ns[0]) / 1e6
    late = {s.gpu for s in spread(ranks.part.gpus).slowest if s.straggler}
    step = max(1, -(-n // 64))
    named = [i for i in range(n) if i % step == 0 or g.gpus[i] in late]
    fig, axes = new((13, 2 * (0.9 + (0.14 if n > 16 else 0.3) * n) + 0.5), 2, 1, sharex=True)
    top = max(float(np.nanmax(g.dtoh_gbps)) if g.dtoh_gbps.size else 0.0, 1e-9)
    head = (title + ": " if title else "") + f"{n} GPUs; limit: {ranks.part.limit.rule}. "
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
    return fig


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
