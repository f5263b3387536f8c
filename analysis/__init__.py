"""Read Nsight Systems SQLite exports and say what the GPU and the transfers did.

    from analysis import Trace, summarize
    with Trace.open("baseline.sqlite") as t:
        report = summarize(t)
    with Trace.open("rank0.sqlite") as a, Trace.open("rank1.sqlite") as b:
        gpus = analyze_ranks([a, b]).summary      # every GPU side by side, and what limits them
"""
from .errors import TraceError
from .trace import Trace
from .summary import summarize
from .ranks import analyze_ranks

__all__ = ["Trace", "TraceError", "summarize", "analyze_ranks"]
