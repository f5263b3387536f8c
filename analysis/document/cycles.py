"""The `cycles` object's types: several traces of one torch.profiler run (a schedule's cycles) and its one verdict
(analysis/cycles.py merges them)."""
from __future__ import annotations

from dataclasses import dataclass

from ..rules.diagnosis import verdict_finding


@dataclass(frozen=True)
class Cycle:
    """One cycle's figures, from its own analysis: its file, first and last step, mean step, GPU busy share, and its
    verdict (the finding's rule, subject, impact and the GPU time it is a share of)."""
    label: str
    path: str
    steps: int
    first_step: str | None
    last_step: str | None
    step_ns: float | None
    gpu_busy: float | None
    gpu_time_ns: int
    rule: str | None
    subject: str | None
    impact_ns: int
    steady: bool = True

    @classmethod
    def of(cls, label: str, summary: dict) -> "Cycle":
        """The cycle's figures from its analysis's summary."""
        steps = summary.get("steps") or {}
        names = sorted((r["name"] for r in ((summary.get("nvtx") or {}).get("ranges") or [])
                        if str(r["name"]).startswith("ProfilerStep#")), key=lambda n: int(n.split("#")[1]))
        g = summary.get("gpu") or {}
        gpus = max(1, len(g.get("devices") or []))
        f = verdict_finding(summary.get("diagnosis") or [])
        return cls(label, str((summary.get("trace") or {}).get("path")), int(steps.get("count") or 0),
                   names[0] if names else None, names[-1] if names else None, steps.get("mean_ns"),
                   g.get("utilization"), int((summary.get("window") or {}).get("duration_ns") or 0) * gpus,
                   f["rule"] if f else None, f.get("subject") if f else None, int(f["impact_ns"]) if f else 0)


@dataclass(frozen=True)
class CycleVerdict:
    """The run's one verdict: the rule and subject that cost the steady cycles the most, its impact summed over them
    and its share of their GPU time, and in how many of them it is the verdict (agree of steady)."""
    rule: str | None
    subject: str | None
    impact_ns: int
    share: float
    agree: int
    steady: int
    suggestion: str | None = None


@dataclass(frozen=True, kw_only=True)
class CycleRun:
    """The `cycles` object: every cycle of the run, its one verdict, the cycle the document details."""
    cycles: tuple[Cycle, ...]
    verdict: CycleVerdict
    detail_cycle: str
