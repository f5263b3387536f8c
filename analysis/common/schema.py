"""The JSON that `analyze-trace --json` writes (docs/json-schema.md), defined once: its id and its top-level keys.

One schema for one trace and for several: every document has every key of KEYS, in that order. One trace fills the
TRACE_SECTIONS; `ranks` holds the multi-GPU comparison when the trace has several GPUs (null with one). Several traces
(one per rank) leave the TRACE_SECTIONS null (the traces are listed in `ranks.traces`) and fill `ranks`. `diagnosis`
holds the findings: one trace's rules, then the multi-GPU limit when there is one (it is also `ranks.limit`).
"""
from __future__ import annotations

from typing import NamedTuple

SCHEMA = "nsys-transfer.analysis/2"
# the sections that describe one trace: null in a document about several traces
TRACE_SECTIONS = ("trace", "window", "setup", "gpu", "memcpy", "steps", "gaps", "idle", "kernels", "nvtx", "code")
KEYS = ("schema", *TRACE_SECTIONS, "diagnosis", "warnings", "ranks")


def one_trace(summary: dict, ranks: dict | None = None) -> dict:
    """One trace's document: its sections as they are; with several GPUs, their comparison under `ranks` and its limit
    finding after the trace's own."""
    doc = {key: summary.get(key) for key in KEYS}
    doc["schema"] = SCHEMA
    if ranks is not None:
        doc["ranks"] = ranks
        doc["diagnosis"] = with_limit(summary["diagnosis"], ranks["limit"])
    return _checked(doc, summary)


DEFERRING_LIMIT = "fix the rank's own pipeline"  # rank-pipeline's suggestion where it names no cause (rules/ranks.py)


def with_limit(findings: list[dict], limit: dict) -> list[dict]:
    """The findings with the multi-GPU limit in its place: first after the capture-trust notes where it names what
    limits the GPUs (so the verdict, the per-GPU lines and the limit line say one thing); by impact where it is a note
    or defers to the trace's own diagnosis (rank-pipeline without a cause of its own)."""
    leads = limit["severity"] != "info" and not limit["suggestion"].startswith(DEFERRING_LIMIT)
    at = next((i for i, f in enumerate(findings) if f["rule"] not in ("incomplete-trace", "failed-run") and
               (leads or f["severity"] == "info" or f["impact_ns"] < limit["impact_ns"])), len(findings))
    return [*findings[:at], limit, *findings[at:]]


def several_traces(ranks: dict, warnings: list[str]) -> dict:
    """Several traces' document: no one-trace sections, the comparison under `ranks`, its limit as the diagnosis."""
    return {"schema": SCHEMA, **dict.fromkeys(TRACE_SECTIONS), "diagnosis": [ranks["limit"]], "warnings": warnings,
            "ranks": ranks}


def own_findings(doc: dict) -> list[dict]:
    """The findings of the trace itself: the diagnosis without the multi-GPU limit (reported with the GPUs)."""
    limit = (doc.get("ranks") or {}).get("limit")
    return [f for f in doc.get("diagnosis") or [] if f != limit]


def _checked(doc: dict, summary: dict) -> dict:
    unknown = set(summary) - set(KEYS)
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


class Part(NamedTuple):
    """One section's part of the summary (JSON-able; None where the trace has nothing for it) and the tables behind it."""
    summary: dict | None
    tables: dict
