"""Read Nsight Systems SQLite exports and say what the GPU and the transfers did: one call, analyze (facade.py),
which returns a Result (result.py).

    from nsys_transfer.analysis import Options, analyze
    report = analyze("baseline.sqlite").summary                 # the JSON document (docs/json-schema.md)
    steady = analyze("baseline.sqlite", Options(whole=True))    # the options: summary.Options
    gpus = analyze(["x.rank0.sqlite", "x.rank1.sqlite"]).ranks  # every GPU side by side, and what limits them
"""
from .facade import (Options, Result, Trace, TraceError, analyze, analyze_runs)
from .result import NotComparable, Ranks, Side

__all__ = ["analyze", "analyze_runs", "Options", "Result", "Ranks", "Side", "NotComparable", "Trace", "TraceError"]
