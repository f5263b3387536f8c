"""What the rules read of an analysis's document (Facts.of): its sections' typed values, named by a protocol, since
the document (analysis/document.Document, which has them all) sits in a layer above the rules."""
from __future__ import annotations

from typing import Protocol

from ..sections.copies import MemcpyPart
from ..sections.cpu import StepsPart
from ..sections.gpu_part import GpuPart
from ..sections.idle_summary import IdleAttribution
from ..sections.kernels import KernelsPart
from ..sections.setup import SetupPart
from ..sections.trace_info import TraceInfo
from ..sections.window import NvtxPart, Window


class Sections(Protocol):
    """What Facts.of reads of an analysis's document: its sections' typed values (analysis/document.Document has
    them; it sits above the rules, which therefore name only what they read)."""
    @property
    def trace(self) -> TraceInfo:
        """The `trace` section."""
    @property
    def window(self) -> Window | None:
        """The `window` section."""
    @property
    def setup(self) -> SetupPart | None:
        """The `setup` section."""
    @property
    def gpu(self) -> GpuPart | None:
        """The `gpu` section."""
    @property
    def memcpy(self) -> MemcpyPart | None:
        """The `memcpy` section."""
    @property
    def steps(self) -> StepsPart | None:
        """The `steps` section."""
    @property
    def idle(self) -> IdleAttribution | None:
        """The `idle` section."""
    @property
    def kernels(self) -> KernelsPart | None:
        """The `kernels` section."""
    @property
    def nvtx(self) -> NvtxPart | None:
        """The `nvtx` section."""
