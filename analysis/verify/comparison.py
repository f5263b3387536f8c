"""verify's comparison document (docs/json-schema.md, "verify"), typed: each part is the type of the module that makes
it, written as JSON by common/typed_json.to_json at the edge (VerifyDocument.as_dict); and its last steps, the same
with GPU work or without: the verdict held against the machine's noise, the prediction held, the gates."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..common.typed_json import to_json
from .gates import Gates, gates
from .loop import LoopSpeed
from .matching import FindingRow
from .metrics import MetricRow
from .noise import Noise, noise
from .predictions import PredictionHeld, prediction_held
from .side import SCHEMA, Side
from .throughput import Speed
from .verdict import Verdict


@dataclass(frozen=True, kw_only=True)
class SideRef:
    """The trace a side was read from, and its label."""
    path: str
    label: str


@dataclass(frozen=True, kw_only=True)
class VerifyDocument:
    """The comparison (`nsys-transfer verify --json`): the verdict, the figures side by side, the loop, the noise,
    the prediction held, every costed finding, the warnings and the gates."""
    schema: str
    before: SideRef
    after: SideRef
    verdict: Verdict
    metrics: tuple[MetricRow, ...]
    loop: LoopSpeed | None
    noise: Noise
    predicted: PredictionHeld | None
    findings: tuple[FindingRow, ...]
    warnings: tuple[str, ...]
    gates: Gates
    exit_code: int

    def as_dict(self) -> dict:
        """The comparison as its JSON (common/typed_json.py)."""
        return to_json(self)


@dataclass
class Comparison:
    """What verify() found: the comparison document, its warnings and whether gates failed."""
    document: VerifyDocument
    warnings: list = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Found:
    """What either comparison (with GPU work or without) found before its last steps: the steady state's speed, the
    findings matched, the verdict, the whole loop, the figures side by side and the warnings."""
    speed: Speed
    rows: list[FindingRow]
    verdict: Verdict
    loop: LoopSpeed | None
    figures: list[MetricRow]
    warnings: list[str]


def compared(before: Side, after: Side, found: Found, fail_if_slower: float | None,
             fail_on_new: str | None) -> Comparison:
    """The comparison: the verdict with what one run a side's noise leaves unsaid, the prediction held, the gates."""
    noisy = noise(before, after, found.verdict.change)
    v = replace(found.verdict, line=found.verdict.line + f"; {noisy.said}") if noisy.said else found.verdict
    held = prediction_held(before.doc, after.doc, found.rows, found.speed, found.loop)
    gated = gates(v, found.rows, fail_if_slower, fail_on_new)
    doc = VerifyDocument(schema=SCHEMA, before=SideRef(path=before.path, label=before.label),
                         after=SideRef(path=after.path, label=after.label), verdict=v, metrics=tuple(found.figures),
                         loop=found.loop, noise=noisy, predicted=held, findings=tuple(found.rows),
                         warnings=tuple(found.warnings), gates=gated, exit_code=1 if gated.failed else 0)
    return Comparison(doc, found.warnings)
