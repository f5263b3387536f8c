"""What the predictions (issue 56) add to analyze-trace's time: the timeline section's read and the replays, timed
inside the analysis of one trace (the same process, so the machine's load moves both alike).

    python benchmarks/prediction_cost.py out/bench/large-0.5g.sqlite [RUNS]   (benchmarks/build_large_trace.py makes it)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import nsys_transfer.analysis.rules.prediction as prediction
import nsys_transfer.analysis.sections.timeline as timeline
from nsys_transfer.analysis.facade import analyze, options_for

SPENT = {"predictions": 0.0, "timeline": 0.0}


def timed(module, name: str, key: str) -> None:
    """module.name, its time added to SPENT[key] at each call."""
    inner = getattr(module, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            SPENT[key] += time.perf_counter() - t0
    setattr(module, name, wrapper)


def main() -> None:
    path, runs = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3
    timed(prediction, "attach", "predictions")
    timed(timeline, "read", "timeline")
    for _ in range(runs):
        SPENT.update(predictions=0.0, timeline=0.0)
        t0 = time.perf_counter()
        analyze(path, options_for(path))
        total = time.perf_counter() - t0
        share = (SPENT["timeline"] + SPENT["predictions"]) / total
        print(f"total {total:.2f} s, timeline {SPENT['timeline']:.2f} s, predictions {SPENT['predictions']:.2f} s: "
              f"{100 * share:.1f}% of it")


if __name__ == "__main__":
    main()
