"""What the predictions (issue 56) add to analyze-trace's time: the timeline section's read and the replays, timed
inside the analysis of one trace (the same process, so the machine's load moves both alike).

    python benchmarks/prediction_cost.py out/bench/large-0.5g.sqlite [RUNS]   (benchmarks/build_large_trace.py makes it)
"""
import time, sys
from pathlib import Path
import nsys_transfer.analysis.rules.prediction as P
import nsys_transfer.analysis.sections.timeline as T
from nsys_transfer.analysis.facade import analyze, options_for
spent = {"attach": 0.0, "timeline": 0.0}
def timed(mod, name, key):
    f = getattr(mod, name)
    def w(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); spent[key] += time.perf_counter() - t; return r
    setattr(mod, name, w)
timed(P, "attach", "attach"); timed(T, "read", "timeline")
import nsys_transfer.analysis.rules.diagnosis as D
D.prediction = P
p = Path(sys.argv[1])
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2):
    spent.update(attach=0.0, timeline=0.0)
    t = time.perf_counter(); analyze(p, options_for(p)); total = time.perf_counter() - t
    print(f"total {total:.2f} s, timeline {spent['timeline']:.2f} s, predictions {spent['attach']:.2f} s: {100*(spent['timeline']+spent['attach'])/total:.1f}% of it")
