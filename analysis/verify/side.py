"""What verify compares: one side of it (a trace's analysis summary, the records beside it, its loop) and what it
gives back (the comparison document and its warnings)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ..document import Document

SCHEMA = "nsys-transfer.verify/1"  # the comparison document's (docs/json-schema.md, "verify")


@dataclass
class Side:
    """One side's analysis summary, its path and, when given, its workload record."""
    path: str
    summary: dict
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

    @cached_property
    def doc(self) -> Document:
        """The summary typed (document.Document), read once when first asked for."""
        return Document.from_json(self.summary)


@dataclass
class Comparison:
    """What verify() found: the comparison document, its warnings and whether gates failed."""
    document: dict
    warnings: list = field(default_factory=list)
