"""What the analysis gives back (facade.analyze), whichever traces it read: one Result that the text and JSON renderers,
the charts, verify, the reports and the Python API (api.py) render; and the result types beside it (the GPUs side by
side, a side of verify, a finding with its line in the program and what its fix buys), with the document's typed
form (Document: the JSON of docs/json-schema.md as frozen dataclasses, read and written by common/typed_json.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from .common.typed_json import from_json
from .cycles import CycleRun
from .verify import NotComparable, Side
from .rank_summary import Ranks, RanksPart
from .rules.base import Finding
from .rules.prediction import Overall, Prediction
from .sections.code_lines import CodeSite
from .sections.code_sites import CodePart
from .sections.copies import MemcpyPart
from .sections.cpu import GapsPart, StepsPart
from .sections.gpu import GpuPart
from .sections.idle_summary import IdleAttribution
from .sections.kernels import KernelsPart
from .sections.setup import SetupPart
from .sections.trace_info import TraceInfo
from .sections.window import NvtxPart, Window

__all__ = ["Result", "Document", "Ranks", "Side", "NotComparable", "Finding", "Prediction", "CodeSite"]


@dataclass(frozen=True, kw_only=True)
class Document:
    """The analysis document (`analyze-trace --json`, docs/json-schema.md), typed: every top-level key in the order
    common/schema.keys() gives them. One trace fills `trace`, `window` and the sections (`ranks` too with several
    GPUs); several traces leave those null and fill `ranks`; a torch.profiler run's cycles fill `cycles`."""
    schema: str
    trace: TraceInfo | None
    window: Window | None
    setup: SetupPart | None
    gpu: GpuPart | None
    memcpy: MemcpyPart | None
    steps: StepsPart | None
    gaps: GapsPart | None
    idle: IdleAttribution | None
    kernels: KernelsPart | None
    nvtx: NvtxPart | None
    code: CodePart | None
    diagnosis: tuple[Finding, ...]
    predicted: Overall | None
    warnings: tuple[str, ...]
    ranks: RanksPart | None
    cycles: CycleRun | None

    @classmethod
    def from_json(cls, data: dict) -> Document:
        """The document read from its JSON (common/typed_json.from_json): JsonShapeError, naming the path, on a key
        or a value its types do not hold."""
        return from_json(cls, data)


@dataclass
class Result:
    """summary: the JSON document (docs/json-schema.md): one trace's, its `ranks` filled when it holds several GPUs,
    or several traces' comparison (schema.several_traces). doc: the same, typed (Document; read from summary when
    first asked for, for now: a toy section declared beside the analysis, tests/test_extension_points.py, is in the
    summary and not in Document's fields, and only doc fails on it). tables: the DataFrames behind it, by name (--csv). gap_causes(device, spans) -> (cause, subject) of
    each idle span by the idle attribution's rules (for charts; one trace with an idle section, None otherwise).
    ranks: the GPUs side by side when there are several (None for one GPU). warnings: what a damaged export made the
    analysis drop or replace."""
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None
    ranks: Ranks | None = None
    warnings: list[str] = field(default_factory=list)

    @cached_property
    def doc(self) -> Document:
        """The document, typed (Document.from_json of summary, once)."""
        return Document.from_json(self.summary)
