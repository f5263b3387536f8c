"""Read Nsight Systems SQLite exports and say what the GPU and the transfers did.

    from analysis import Trace, summarize
    with Trace.open("baseline.sqlite") as t:
        report = summarize(t)
"""
from .errors import TraceError
from .trace import Trace
from .summary import summarize

__all__ = ["Trace", "TraceError", "summarize"]
