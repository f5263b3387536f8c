"""Read Nsight Systems SQLite exports and say what the GPU and the transfers did.

    from nsys_transfer.analysis import Trace, summarize
    with Trace.open("baseline.sqlite") as t:
        report = summarize(t)
    with Trace.open("rank0.sqlite") as a, Trace.open("rank1.sqlite") as b:
        gpus = analyze_ranks([a, b]).summary      # every GPU side by side, and what limits them
"""
from nsys_transfer.analysis.common.errors import TraceError
from nsys_transfer.analysis.load.trace import Trace
from nsys_transfer.analysis.summary import summarize
from nsys_transfer.analysis.rank_summary import analyze_ranks

__all__ = ["Trace", "TraceError", "summarize", "analyze_ranks"]
