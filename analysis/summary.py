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
from .common import defaults
from .common import schema
from .common.schema import SCHEMA, Part
from .sections.base import declared, section_keys, table_keys
from .common.window_spec import Spec


@dataclass
class Options:
    """How to analyse one trace (analyze-trace's options); None means detect it from the trace."""
    min_gap_ns: int = defaults.MIN_GAP_NS
    step_regex: str | None = None       # None: detected from the NVTX names (cpu.detect_step_regex)
    window: tuple[int, int] | None = None
    top: int = defaults.TOP
    pipeline_depth: int = defaults.PIPELINE_DEPTH
    bin_ns: int = defaults.BIN_NS   # host DtoH bandwidth timeline
    link_gbps: float | None = None      # None: from the trace's own GPU (machine.host_link)
    run_record: dict | None = None      # this toolkit's run record beside the trace, if any
    whole: bool = False                 # the whole capture, set-up and warm-up included (default: the steady state)
    window_asked: Spec | None = None    # how the user gave `window` (--window or --steps), for its `source`


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
    made = schedule.run(sections, {"trace": trace, "opts": opts, "say": say}, keep=KEPT)
    parts: dict[str, Part] = {s.name: made[s.name] for s in sections if s.part}
    info = made["trace_info"]
    out = {"schema": SCHEMA, "trace": info, "window": made["window"], **{k: parts[k].summary for k in section_keys()}}
    tables = {name: df for k in table_keys() for name, df in parts[k].tables.items()}
    say("diagnosing")
    info["integrity"] = capture_checks.verdict(made["integrity_figures"].result())
    ctx = Context(Facts.of(out, tables), opts.pipeline_depth, made["code_lines"], opts.min_gap_ns, made["timeline"])
    out["diagnosis"], overall = diagnose(ctx)
    out["predicted"] = overall.as_dict()
    info["counts"]["osrt_calls"] = trace.osrt.count()  # after the scoped reads: they say if it is damaged
    out["warnings"] = sorted(set(trace.warnings))  # rows a damaged export made us drop (load.validate)
    out["ranks"] = None  # several GPUs: analysis.rank_summary fills it (schema.one_trace)
    idle_part = made["idle_part"]
    return TraceSections(schema.one_trace(out, section_keys()), tables, idle_part.gap_causes if idle_part else None,
                    made["timeline"])


# what analyze_sections() reads of the sections' values beside their Parts
KEPT = ("trace_info", "window", "integrity_figures", "idle_part", "code_lines", "timeline")
