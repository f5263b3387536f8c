"""Several torch.profiler traces of one run, read as that run (issue 58, item 6): a schedule without repeat=1 writes a
trace per cycle (`tensorboard_trace_handler` names them <host>_<pid>.<ns>.pt.trace.json), each holding that cycle's
active steps. They are one process's, one after the other, so they are one run, not ranks: each cycle is analysed
alone (facade.analyze_cycles, in --jobs workers where asked), then merged here into one verdict.

    cycle 1  steps 2-4   62.1 ms a step   <- warm-up: > WARMUP_RATIO x the other cycles' median step, and first
    cycle 2  steps 7-9   40.3 ms a step   \\
    cycle 3  steps 12-14 40.8 ms a step   /  the steady cycles: the verdict is theirs

The verdict is the finding (rule and subject) that costs the steady cycles the most GPU time in all: its impact summed
over them, its share of their GPU time summed, and in how many of them it is the verdict. What one cycle's verdict is
comes from rules/diagnosis.verdict_of, the choice the text's verdict line makes for one trace.

Whether traces are cycles of one run is read from the traces themselves (is_one_run): every one a torch.profiler
trace of the same process on the same host, none of a distinct rank, none overlapping another in time."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .common import schema
from .sections.steady import WARMUP_RATIO
from .document import Document
from .document.cycles import Cycle, CycleRun, CycleVerdict


__all__ = ["Cycle", "CycleVerdict", "CycleRun", "Cycles", "merge", "is_one_run", "Identity"]


@dataclass(frozen=True)
class Identity:
    """What tells a trace's run apart: profiler, host, process, rank, and its span on the UTC clock (ns)."""
    profiler: str
    host: str | None
    pid: str
    rank: str
    start_utc_ns: int | None
    end_utc_ns: int | None


def is_one_run(ids: list[Identity]) -> bool:
    """Whether these traces are the cycles of one torch.profiler run: one host, one process, no distinct ranks, and
    no two of them overlapping in time (ranks of one job run at once; cycles follow one another)."""
    if len(ids) < 2 or any(i.profiler != "torch.profiler" for i in ids):
        return False
    if len({(i.host, i.pid) for i in ids}) != 1 or len({i.rank for i in ids}) != 1:
        return False
    spans = sorted((i.start_utc_ns, i.end_utc_ns) for i in ids if i.start_utc_ns is not None and
                   i.end_utc_ns is not None)
    return all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))


@dataclass
class Cycles:
    """The run: its cycles (in time order), which are steady, the verdict, and the analysis of the steady cycle whose
    step is the median of theirs (detail: its full summary, for the text's and the JSON's details)."""
    cycles: list[Cycle]
    verdict: CycleVerdict
    detail_label: str
    detail: dict

    def document(self) -> dict:
        """The JSON document (docs/json-schema.md, `cycles`): the detail cycle's, with every cycle and the verdict."""
        return schema.cycles_run(self.detail, {"cycles": [asdict(c) for c in self.cycles],
                                               "verdict": asdict(self.verdict), "detail_cycle": self.detail_label})


def merge(labels: list[str], summaries: list[dict]) -> Cycles:
    """The cycles (labels and their analyses' summaries, in time order, as the workers sent them back) as one run with
    one verdict (module doc)."""
    docs = [Document.from_json(s) for s in summaries]  # each read once into its types
    cycles = [Cycle.of(label, d) for label, d in zip(labels, docs)]
    steps = np.array([c.step_ns or np.nan for c in cycles], float)
    if len(cycles) >= 2 and np.isfinite(steps[0]) and np.isfinite(steps[1:]).any():
        rest = float(np.nanmedian(steps[1:]))
        if steps[0] > WARMUP_RATIO * rest:  # the first cycle's steps are warm-up outliers: set-up, left out
            cycles[0] = Cycle(**{**asdict(cycles[0]), "steady": False})
    steady = [c for c in cycles if c.steady]
    verdict = _verdict(steady)
    detail = _median_cycle(steady, verdict)
    i = cycles.index(detail)
    suggestion = next((f.suggestion for f in docs[i].diagnosis
                       if f.rule == verdict.rule and f.subject == verdict.subject), None)
    verdict = CycleVerdict(**{**asdict(verdict), "suggestion": suggestion})
    return Cycles(cycles, verdict, detail.label, summaries[i])


def _verdict(steady: list[Cycle]) -> CycleVerdict:
    """The finding that costs the steady cycles the most in all (a cycle with no costed finding counts for none)."""
    by: dict[tuple, int] = {}
    agree: dict[tuple, int] = {}
    for c in steady:
        key = (c.rule, c.subject)
        by[key] = by.get(key, 0) + c.impact_ns
        agree[key] = agree.get(key, 0) + 1
    key = max(by, key=lambda k: (by[k], agree[k])) if by else (None, None)
    time = sum(c.gpu_time_ns for c in steady)
    return CycleVerdict(key[0], key[1], by.get(key, 0), by.get(key, 0) / time if time else 0.0, agree.get(key, 0),
                        len(steady))


def _median_cycle(steady: list[Cycle], verdict: CycleVerdict) -> Cycle:
    """Of the steady cycles whose verdict is the run's, the one with the median step (the first where none is)."""
    mine = [c for c in steady if (c.rule, c.subject) == (verdict.rule, verdict.subject)] or steady
    ordered = sorted(mine, key=lambda c: c.step_ns or 0)
    return ordered[(len(ordered) - 1) // 2]
