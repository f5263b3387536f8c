"""All analyses of one trace, as tables (DataFrames) and as the documented JSON (docs/json-schema.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from . import schedule
from .load.trace import Trace
from .rules import capture_checks
from .rules.base import Context
from .rules.diagnosis import diagnose
from .rules.facts import Facts
from .common import schema
from .common.schema import SCHEMA, Part
from .sections import code_lines, gpu, idle_summary, timeline, trace_info, window
from .sections.base import OPTS, SAY, TRACE, Options, declared, section_keys, table_keys

__all__ = ["Options", "TraceSections", "analyze_sections"]  # Options: declared with the sections' given values


@dataclass
class TraceSections:
    """One trace's sections assembled, before the facade makes its public Result of them (result.py; facade.analyze
    adds the GPUs side by side where there are several): the JSON summary and the tables behind it; gap_causes(device,
    spans) -> (cause, subject) of each idle span by the idle attribution's rules (for charts; None without an idle
    section); the replayed timeline."""
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None
    timeline: object = None  # the steady iterations the predictions replayed (sections/timeline.Timeline), if any


def analyze_sections(trace: Trace, opts: Options | None = None, progress=None) -> TraceSections:
    """One open trace's sections over opts.window (in trace ns; facade.analyze, the public door, resolves a window the
    user asked for first): the summary (JSON-able) and the tables behind it. Each section declares itself in its module
    under sections/ (sections/base.py); analysis/schedule.py runs them in the order their declarations set, the long
    reads on background threads beside the rest."""
    opts = opts or Options()
    say = progress or (lambda msg: None)
    sections = declared()
    made = schedule.run(sections, {TRACE: trace, OPTS: opts, SAY: say}, keep=KEPT)
    parts: dict[str, Part] = {s.part: made[s.make] for s in sections if s.part}
    info = made[trace_info.part]
    out = {"schema": SCHEMA, "trace": info, "window": made[window.part], **{k: parts[k].summary for k in section_keys()}}
    tables = {name: df for k in table_keys() for name, df in parts[k].tables.items()}
    say("diagnosing")
    info["integrity"] = capture_checks.verdict(made.field(gpu.PassedOver.integrity_figures).result())
    lines, replayed = made[code_lines.program_lines], made[timeline.timeline]
    ctx = Context(Facts.of(out, tables), opts.pipeline_depth, lines, opts.min_gap_ns, replayed)
    out["diagnosis"], overall = diagnose(ctx)
    out["predicted"] = overall.as_dict()
    info["counts"]["osrt_calls"] = trace.osrt.count()  # after the scoped reads: they say if it is damaged
    out["warnings"] = sorted(set(trace.warnings))  # rows a damaged export made us drop (load.validate)
    out["ranks"] = None  # several GPUs: analysis.rank_summary fills it (schema.one_trace)
    idle_part = made[idle_summary.idle_part]
    return TraceSections(schema.one_trace(out, section_keys()), tables, idle_part.gap_causes if idle_part else None,
                         replayed)


# what analyze_sections() reads of the sections' values beside their Parts, by their producers
KEPT = (trace_info.part, window.part, gpu.PassedOver.integrity_figures, idle_summary.idle_part,
        code_lines.program_lines, timeline.timeline)
