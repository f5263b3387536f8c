"""The JSON that `analyze-trace --json` writes (docs/json-schema.md), defined once: its id and its frame of top-level
keys, around the sections' Parts (each declares its place with itself: sections/base.section_keys, which the callers
pass here as `sections`).

One schema for one trace and for several: every document has every key of keys(sections), in that order. One trace
fills the trace_sections(); `ranks` holds the multi-GPU comparison when the trace has several GPUs (null with one).
Several traces (one per rank) leave the trace_sections() null (the traces are listed in `ranks.traces`) and fill
`ranks`. `diagnosis` holds the findings: one trace's rules, then the multi-GPU limit when there is one (it is also
`ranks.limit`). Several traces of one torch.profiler run (a schedule's cycles) are the document of the steady cycle
with the median step, and `cycles` holds every cycle and the run's one verdict (cycles_run; null in every other
document). Every document is checked against its keys (one_trace, several_traces), one GPU or several.
"""
from __future__ import annotations

from typing import Any, NamedTuple

SCHEMA = "nsys-transfer.analysis/2"


def trace_sections(sections: tuple[str, ...]) -> tuple[str, ...]:
    """The keys that describe one trace (null in a document about several traces): `trace`, `window` and the Parts."""
    return ("trace", "window", *sections)


def keys(sections: tuple[str, ...]) -> tuple[str, ...]:
    """Every top-level key of a document, in order, around the Parts' keys (sections/base.section_keys)."""
    return ("schema", *trace_sections(sections), "diagnosis", "predicted", "warnings", "ranks", "cycles")


def one_trace(summary: dict, sections: tuple[str, ...]) -> dict:
    """One trace's document as JSON: its sections as they are, every key in order. ValueError on a key outside the
    schema. (The analysis makes it typed, summary.analyze_sections; with several GPUs the facade adds their
    comparison under `ranks` and its limit finding, with_limit.)"""
    doc = {key: summary.get(key) for key in keys(sections)}
    doc["schema"] = SCHEMA
    return _checked(doc, summary, sections)


DEFERRING_LIMIT = "fix the rank's own pipeline"  # rank-pipeline's suggestion where it names no cause (rules/ranks.py)


def with_limit(findings: list, limit) -> list:
    """The findings (rules/base.Finding) with the multi-GPU limit in its place: first after the capture-trust notes
    where it names what limits the GPUs (so the verdict, the per-GPU lines and the limit line say one thing); by
    impact where it is a note or defers to the trace's own diagnosis (rank-pipeline without a cause of its own)."""
    leads = limit.severity != "info" and not limit.suggestion.startswith(DEFERRING_LIMIT)
    at = next((i for i, f in enumerate(findings) if f.rule not in ("incomplete-trace", "failed-run") and
               (leads or f.severity == "info" or f.impact_ns < limit.impact_ns)), len(findings))
    return [*findings[:at], limit, *findings[at:]]


def several_traces(ranks: dict, warnings: list[str], sections: tuple[str, ...]) -> dict:
    """Several traces' document: no one-trace sections, the comparison under `ranks`, its limit as the diagnosis."""
    doc = {"schema": SCHEMA, **dict.fromkeys(trace_sections(sections)), "diagnosis": [ranks["limit"]],
           "predicted": None, "warnings": warnings, "ranks": ranks, "cycles": None}
    return _checked(doc, doc, sections)


def cycles_run(detail: dict, cycles: dict) -> dict:
    """Several cycles of one run: the document of the cycle shown in full (`detail`, one trace's), its `cycles` the
    run's cycles and verdict."""
    return {**detail, "cycles": cycles}


def _checked(doc: dict, summary: dict, sections: tuple[str, ...]) -> dict:
    unknown = set(summary) - set(keys(sections))
    if unknown:
        raise ValueError(f"keys outside the schema {SCHEMA} (analysis/common/schema.py): {sorted(unknown)}")
    return doc


def json_rows(df) -> list[dict]:
    """JSON-safe rows: numpy scalars to Python, NaN to None."""
    out = []
    for row in df.to_dict("records"):
        clean = {}
        for k, v in row.items():
            if hasattr(v, "item"):
                v = v.item()
            if isinstance(v, float) and v != v:
                v = None
            clean[str(k)] = v
        out.append(clean)
    return out


def rows_as(cls: type, df) -> tuple:
    """Each row of df as a cls (a frozen dataclass whose fields are the columns), in order: the values json_rows
    gives (numpy scalars to Python, NaN to None), so that the JSON written of them is the rows' own."""
    return tuple(cls(**row) for row in json_rows(df))


class Part(NamedTuple):
    """One section's part of the document: its typed value (the frozen dataclass defined beside the section, which
    summary.analyze_sections places in the Document under the section's key; None where the trace has nothing for
    it) and the tables behind it."""
    summary: Any
    tables: dict
