"""What verify compares: one side of it (a trace's analysis document, the records beside it, its loop), and its loop as
the comparison gives it."""
from __future__ import annotations

from dataclasses import dataclass

from ..common.typed_json import ABSENT, Absent
from ..document import Document
from ..sections.loop import WorkersStart

SCHEMA = "nsys-transfer.verify/1"  # the comparison document's (docs/json-schema.md, "verify")


@dataclass
class Side:
    """One side's analysis (its typed document), its path and, when given, its workload record."""
    path: str
    doc: Document
    workload: dict | None = None
    label: str = ""
    recorded: dict | None = None  # what nsys was asked to record (the run record beside the trace), if known
    loop: dict | None = None      # the loop as the program runs it (facade.side_of; sections/loop.py), if read
    # a capture without GPU work: every line its main thread was sampled at in the loop, under the finding threshold
    # too ({"period_ns", "lines"}: sections/loop_lines.py), if read
    sampled: dict | None = None
    command: list | None = None   # the command line that ran the program (the run record beside the trace), if known
    # the window's steps, each one's start to the next one's (each process's apart), ns: the pace's spread (noise.py)
    step_periods_ns: list | None = None

@dataclass(frozen=True, kw_only=True)
class LoopSide:
    """A side's loop as the comparison gives it (verify's `loop.sides.before`, `.after`): the loop record (Side.loop:
    its span, what set each end, the GPU's last operation, the CUDA calls traced in it and their floor, its output
    workers' start), its rate and unit, and with GPU work the set-up the steady state leaves out (ms)."""
    start_ns: int
    end_ns: int
    duration_ns: int
    start_from: str
    end_from: str
    gpu_end_ns: int
    cuda_calls: int
    call_floor_ns: float | None
    workers_start: WorkersStart | None
    per_second: float | None
    unit: str | None
    warmup_ms: float | Absent = ABSENT
    drain_ms: float | Absent = ABSENT
    workers_wait_ms: float | Absent = ABSENT

    @classmethod
    def of(cls, loop: dict, **figures) -> LoopSide:
        """A side's loop record (Side.loop: sections/loop.py's Loop as facade.side_of reads it) with the comparison's
        figures (per_second, unit, and the set-up's ms where they are said)."""
        ws = loop["workers_start"]
        return cls(**{**loop, "workers_start": WorkersStart(**ws) if ws else None}, **figures)


@dataclass(frozen=True, kw_only=True)
class LoopSides:
    """Each side's loop (verify's `loop.sides`)."""
    before: LoopSide
    after: LoopSide

    def items(self) -> tuple[tuple[str, LoopSide], ...]:
        """("before", its loop), ("after", its loop)."""
        return ("before", self.before), ("after", self.after)
