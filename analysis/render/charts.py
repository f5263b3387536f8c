"""One trace's charts by kind: what analyze-trace --plots writes (<stem>_<kind>.png) and the Python API's r.plot
returns, the same drawing."""
from __future__ import annotations

from ..result import Result
from .figure import Chart
from .plots import breakdown_figure, dtoh_figure, gaps_figure, timeline_figure
from .rank_plots import ranks_figure

TRACE_CHARTS = ("timeline", "gaps", "dtoh", "breakdown", "gpus")  # one trace's charts: --plots' <stem>_<kind>.png


def trace_chart(kind: str, analysis: Result, trace, name: str) -> Chart | None:
    """One of a trace's charts (TRACE_CHARTS) as analyze-trace --plots draws it and the Python API returns it, titled
    by name (the trace file's stem); trace: the analysed trace, open (the timeline draws its kernels and NVTX ranges);
    None where the chart would show nothing (no window, no idle gap, no DtoH copy, no GPU time, one GPU)."""
    if kind == "timeline":
        return timeline_figure(analysis, trace, name=name)
    if kind == "gaps":
        return gaps_figure(analysis, name)
    if kind == "dtoh":
        return dtoh_figure(analysis, analysis.doc.trace.link.gbps, name)
    if kind == "breakdown":
        return breakdown_figure([analysis.doc], [name], title=f"{name}: where the GPU's time went")
    if kind == "gpus":
        return ranks_figure(analysis.ranks, title=name) if analysis.ranks is not None else None
    raise ValueError(f"no chart {kind!r}: one of {', '.join(TRACE_CHARTS)}")
