"""Each analysis option's default and unit conversion, in one place: the one-trace Options (summary.py), the several-GPU
RankOptions (rank_summary.py) and the command lines (cli/analyze.py) read them here."""
from __future__ import annotations

MIN_GAP_MS = 1.0          # --min-gap-ms: the shortest GPU idle gap counted, in ms on the command line
BIN_NS = 10_000_000       # the host DtoH timeline's bin
TOP = 10                  # --top: rows in each top-N list
PIPELINE_DEPTH = 10       # --pipeline-depth: output buffers in the pipeline, for the short-capture rule
# nsys's own cost of each traced CUDA call, which a program's unprofiled clock does not pay: nsys 2024.2 on an H200
# (2026-12-05, docs/benchmarks.md: a loop of 230,000 traced calls, `.item()` reads, ran 1.9-3.7 us a call slower than
# unprofiled); verify's bias (verify/profiler_cost.py) and the predictions' unprofiled end (rules/prediction.py) read it
NSYS_CALL_COST_NS = 2_000


def ns_of_ms(ms: float) -> int:
    """A command line's ms as the analysis takes it, in ns (--min-gap-ms): the one conversion."""
    return int(ms * 1e6)


def ms_of_ns(ns: float) -> float:
    """ns as the command line says them, in ms (what `--min-gap-ms` was given as)."""
    return ns / 1e6


MIN_GAP_NS = ns_of_ms(MIN_GAP_MS)
