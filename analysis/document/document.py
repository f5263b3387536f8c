"""The analysis document (`analyze-trace --json`, docs/json-schema.md) typed: Document, whose fields are the
sections' own types (each defined beside the section that makes it), read from and written to its JSON by
common/typed_json.py."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..common.typed_json import NOT_IN_JSON, from_json, to_json
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


@dataclass(frozen=True)
class ExtraPart:
    """A Part declared beside the analysis that Document has no field for (a section added by its declaration alone,
    tests/test_extension_points.py): its key, its value (any type to_json writes), and the key it follows in the JSON
    (the place its declaration gives it, kept with it: the declaration may be gone when the JSON is written)."""
    key: str
    after: str
    value: Any


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
    extra: tuple[ExtraPart, ...] = field(default=(), metadata=NOT_IN_JSON)  # the Parts Document does not name

    def __to_json__(self) -> dict:
        """The JSON (common/typed_json.to_json of each field in order), each extra Part after the key it follows."""
        out: dict = {}
        pending = list(self.extra)

        def put(key: str, value: Any) -> None:
            out[key] = to_json(value)
            for x in [x for x in pending if x.after == key]:
                pending.remove(x)
                put(x.key, x.value)
        for f in fields(self):
            if f.metadata.get("json", True):
                put(f.name, getattr(self, f.name))
        return out

    @classmethod
    def from_json(cls, data: dict) -> Document:
        """The document read from its JSON (common/typed_json.from_json): JsonShapeError, naming the path, on a key
        or a value its types do not hold."""
        return from_json(cls, data)

    @classmethod
    def made_as_json(cls, data: dict) -> Document:
        """A document an assembler made as JSON (several traces' comparison, analysis/rank_summary.py): read as
        from_json, the keys Document does not name (Parts declared beside the analysis, null there) carried as
        extra Parts in their places."""
        named = {f.name for f in fields(cls)}
        keys = list(data)
        extra = tuple(ExtraPart(k, keys[i - 1], data[k]) for i, k in enumerate(keys) if k not in named)
        return from_json(cls, {k: v for k, v in data.items() if k in named}).with_extra(extra)

    def with_extra(self, extra: tuple[ExtraPart, ...]) -> Document:
        """The same document with these extra Parts."""
        return replace(self, extra=extra) if extra else self
