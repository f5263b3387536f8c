"""The charts the command lines draw (--plots), shared by analyze-trace and verify: the charts module, loaded only
when charts are asked for, and one trace's charts into a folder under the names --plots gives them."""
from __future__ import annotations

from pathlib import Path

import click

from nsys_transfer.analysis.facade import Result, Trace, defaults

PLOT_KINDS = ("timeline", "gaps", "dtoh", "breakdown", "gpus")  # <stem>_<kind>.png, what --plots writes of a trace


def plots():
    """The charts module (analysis/render/plots.py), imported only when charts are asked for: matplotlib costs ~0.3 s
    of every run."""
    import nsys_transfer.analysis.render.plots as module  # noqa: PLC0415
    return module


def rank_plots():
    """The several-GPU charts module (analysis/render/rank_plots.py), imported only when charts are asked for, as
    plots()."""
    import nsys_transfer.analysis.render.rank_plots as module  # noqa: PLC0415
    return module


def plot_stem_of(trace: Path) -> str:
    """What a trace's chart names start with: its file name up to the first dot."""
    return trace.name.split(".")[0]


def plot_trace(a: Result, t: Trace, plot_dir: Path, stem: str, min_gap_ns: int, tool: str) -> None:
    """A trace's charts into plot_dir as <stem>_<kind>.png; a chart that would show nothing (no DtoH copy, no idle
    gap) is not drawn, said once on stderr (`tool` names the command), and its file from an earlier run removed: the
    folder holds this run's."""
    drawing = plots()
    plot_dir.mkdir(parents=True, exist_ok=True)
    path = {k: plot_dir / f"{stem}_{k}.png" for k in PLOT_KINDS}
    drawn = {"timeline": drawing.plot_timeline(a, t, path["timeline"], name=stem),
             "gaps": drawing.plot_gaps(a, path["gaps"], name=stem),
             "dtoh": drawing.plot_dtoh(a, path["dtoh"], a.summary["trace"]["link"]["gbps"], name=stem),
             "breakdown": drawing.plot_breakdown([a.summary], [stem], path["breakdown"],
                                                 title=f"{stem}: where the GPU's time went"),
             "gpus": rank_plots().plot_ranks(a.ranks, path["gpus"], title=stem) if a.ranks is not None else None}
    why = {"timeline": "no window to draw", "gaps": f"no GPU idle gap >= {defaults.ms_of_ns(min_gap_ns):g} ms",
           "dtoh": "no DtoH copies", "breakdown": "no GPU time to share out"}
    left = [f"{path[k].name} ({why[k]})" for k in PLOT_KINDS if drawn[k] is None and k in why]
    for k in PLOT_KINDS:
        if drawn[k] is None and path[k].exists():
            path[k].unlink()
    if left:
        click.echo(f"{tool}: --plots: not drawn: {'; '.join(left)}", err=True)
