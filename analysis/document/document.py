"""The analysis document (`analyze-trace --json`, docs/json-schema.md) typed: Document, whose fields are the
sections' own types (each defined beside the section that makes it), read from and written to its JSON by
common/typed_json.py."""
from __future__ import annotations

from dataclasses import dataclass

from ..common.typed_json import from_json
from ..rules.base import Finding
from ..rules.prediction import Overall
from ..sections.code_sites import CodePart
from ..sections.copies import MemcpyPart
from ..sections.cpu import GapsPart, StepsPart
from ..sections.gpu_part import GpuPart
from ..sections.idle_summary import IdleAttribution
from ..sections.kernels import KernelsPart
from ..sections.setup import SetupPart
from ..sections.trace_info import TraceInfo
from ..sections.window import NvtxPart, Window
from .cycles import CycleRun
from .ranks import RanksPart


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
