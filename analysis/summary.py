"""All analyses of one trace, as tables (DataFrames) and as the documented JSON (docs/json-schema.md)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property

import pandas as pd

from . import schedule
from .load.trace import Trace
from .rules import capture_checks
from .rules.base import Context
from .rules.diagnosis import diagnose
from .rules.facts import Facts
from .common import schema
from .common.schema import SCHEMA, Part
from .common.typed_json import from_json, to_json
from .document import Document, ExtraPart
from .sections.capture_figures import Integrity
from .sections.trace_info import TraceInfo
from .sections.window import Window
from .sections import code_lines, gpu, idle_summary, timeline, trace_info, window
from .sections.base import OPTS, SAY, TRACE, Options, declared, section_keys, table_keys

__all__ = ["Options", "TraceSections", "analyze_sections"]  # Options: declared with the sections' given values


@dataclass
class TraceSections:
    """One trace's sections assembled, before the facade makes its public Result of them (result.py; facade.analyze
    adds the GPUs side by side where there are several): the document (Document, typed) and the tables behind it;
    gap_causes(device, spans) -> (cause, subject) of each idle span by the idle attribution's rules (for charts; None
    without an idle section); the replayed timeline."""
    doc: Document
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None
    timeline: object = None  # the steady iterations the predictions replayed (sections/timeline.Timeline), if any

    @cached_property
    def summary(self) -> dict:
        """The JSON document (docs/json-schema.md): to_json of doc, made once."""
        return to_json(self.doc)


def analyze_sections(trace: Trace, opts: Options | None = None, progress=None) -> TraceSections:
    """One open trace's sections over opts.window (in trace ns; facade.analyze, the public door, resolves a window the
    user asked for first): the document (typed) and the tables behind it. Each section declares itself in its module
    under sections/ (sections/base.py); analysis/schedule.py runs them in the order their declarations set, the long
    reads on background threads beside the rest."""
    opts = opts or Options()
    say = progress or (lambda msg: None)
    sections = declared()
    made = schedule.run(sections, {TRACE: trace, OPTS: opts, SAY: say}, keep=KEPT)
    parts: dict[str, Part] = {s.part: made[s.make] for s in sections if s.part}
    tables = {name: df for k in table_keys() for name, df in parts[k].tables.items()}
    say("diagnosing")
    info = made[trace_info.part]
    integrity = capture_checks.verdict(made.field(gpu.PassedOver.integrity_figures).result())
    doc = _document(replace(info, integrity=from_json(Integrity, integrity)), made[window.part], parts)
    lines, replayed = made[code_lines.program_lines], made[timeline.timeline]
    ctx = Context(Facts.of(doc, tables), opts.pipeline_depth, lines, opts.min_gap_ns, replayed)
    diagnosis, overall = diagnose(ctx)
    # the OS runtime calls counted after the scoped reads: they say if the table is damaged
    info = replace(doc.trace, counts=replace(doc.trace.counts, osrt_calls=trace.osrt.count()))
    doc = replace(doc, trace=info, diagnosis=diagnosis, predicted=overall,
                  warnings=tuple(sorted(set(trace.warnings))))  # rows a damaged export made us drop (load.validate)
    idle_part = made[idle_summary.idle_part]
    return TraceSections(doc, tables, idle_part.gap_causes if idle_part else None, replayed)


def _document(info: TraceInfo, win: Window, parts: dict[str, Part]) -> Document:
    """One trace's document of its sections, before the diagnosis: each Part under its key, in the order the
    schema gives them (common/schema.keys); a Part Document does not name (declared beside the analysis) as an
    extra Part in its place. `ranks` null: several GPUs' comparison fills it (facade.analyze); `cycles` null."""
    order = schema.keys(section_keys())
    named = {f.name for f in fields(Document)}
    values = {k: parts[k].summary for k in section_keys()}
    extra = tuple(ExtraPart(k, order[order.index(k) - 1], v) for k, v in values.items() if k not in named)
    return Document(schema=SCHEMA, trace=info, window=win, diagnosis=(), predicted=None, warnings=(), ranks=None,
                    cycles=None, **{k: v for k, v in values.items() if k in named}).with_extra(extra)


# what analyze_sections() reads of the sections' values beside their Parts, by their producers
KEPT = (trace_info.part, window.part, gpu.PassedOver.integrity_figures, idle_summary.idle_part,
        code_lines.program_lines, timeline.timeline)
