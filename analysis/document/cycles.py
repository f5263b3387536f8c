"""The `cycles` object's types: several traces of one torch.profiler run (a schedule's cycles) and its one verdict
(analysis/cycles.py merges them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..rules.diagnosis import verdict_of

if TYPE_CHECKING:  # document.py holds these types: imported for the annotation alone
    from .document import Document


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
    def of(cls, label: str, doc: Document) -> "Cycle":
        """The cycle's figures from its analysis's document."""
        names = sorted((r.name for r in (doc.nvtx.ranges if doc.nvtx else ()) if str(r.name).startswith("ProfilerStep#")),
                       key=lambda n: int(n.split("#")[1]))
        gpus = max(1, len(doc.gpu.devices) if doc.gpu else 0)
        f = verdict_of(doc.diagnosis)
        steps = doc.steps
        return cls(label, str(doc.trace.path if doc.trace else None), int((steps.count if steps else 0) or 0),
                   names[0] if names else None, names[-1] if names else None, steps.mean_ns if steps else None,
                   doc.gpu.utilization if doc.gpu else None,
                   int((doc.window.duration_ns if doc.window else 0) or 0) * gpus,
                   f.rule if f else None, f.subject if f else None, int(f.impact_ns) if f else 0)


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
