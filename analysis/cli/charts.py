"""The charts the command lines draw (--plots), shared by analyze-trace and verify: the charts module, loaded only
when charts are asked for, and one trace's charts into a folder under the names --plots gives them."""
from __future__ import annotations

from pathlib import Path

import click

from ..facade import Result, Trace, defaults


def plots():
    """The charts module (analysis/render/plots.py), imported only when charts are asked for: matplotlib costs ~0.3 s
    of every run."""
    from ..render import plots as module  # noqa: PLC0415
    return module


def trace_charts():
    """One trace's charts by kind (analysis/render/charts.py), imported only when charts are asked for, as plots()."""
    from ..render import charts as module  # noqa: PLC0415
    return module


def rank_plots():
    """The several-GPU charts module (analysis/render/rank_plots.py), imported only when charts are asked for, as
    plots()."""
    from ..render import rank_plots as module  # noqa: PLC0415
    return module


def plot_stem_of(trace: Path) -> str:
    """What a trace's chart names start with: its file name up to the first dot."""
    return trace.name.split(".")[0]


def plot_trace(a: Result, t: Trace, plot_dir: Path, stem: str, min_gap_ns: int, tool: str) -> None:
    """A trace's charts into plot_dir as <stem>_<kind>.png; a chart that would show nothing (no DtoH copy, no idle
    gap) is not drawn, said once on stderr (`tool` names the command), and its file from an earlier run removed: the
    folder holds this run's."""
    drawing = trace_charts()
    plot_dir.mkdir(parents=True, exist_ok=True)
    why = {"timeline": "no window to draw", "gaps": f"no GPU idle gap >= {defaults.ms_of_ns(min_gap_ns):g} ms",
           "dtoh": "no DtoH copies", "breakdown": "no GPU time to share out"}
    left = []
    for kind in drawing.TRACE_CHARTS:  # one at a time: a long trace's timeline and gaps are large figures
        path = plot_dir / f"{stem}_{kind}.png"
        fig = drawing.trace_chart(kind, a, t, stem)
        if fig is not None:
            plots().save(fig, path)  # the one place a chart is written
            continue
        path.unlink(missing_ok=True)
        if kind in why:
            left.append(f"{path.name} ({why[kind]})")
    if left:
        click.echo(f"{tool}: --plots: not drawn: {'; '.join(left)}", err=True)
