"""verify's whole comparison: the two sides checked, then their speed, figures, findings, loop, verdict, the
prediction held and the gates, assembled into one document (docs/json-schema.md, "verify"); two captures without GPU
work go to cpu.py, their loops compared by their time."""
from __future__ import annotations

from .backlog import with_backlog
from .comparability import check_comparable
from .cpu import verify_cpu
from .gates import gates
from .loop import loop_speed
from .matching import findings
from .metrics import metrics
from .noise import noise
from .predictions import prediction_held
from .side import SCHEMA, Comparison, Side
from .throughput import throughput, work_of
from .verdict import verdict


def verify(before: Side, after: Side, fail_if_slower: float | None = None, fail_on_new: str | None = None) -> Comparison:
    """The whole comparison (NotComparable when there is none to make); two captures without GPU work are compared by
    their loops' time (cpu.verify_cpu)."""
    warnings = check_comparable(before, after)
    if not before.doc.gpu and not after.doc.gpu:
        return verify_cpu(before, after, warnings, fail_if_slower, fail_on_new)
    speed = throughput(before, after)
    work = work_of(before, after, speed)
    rows = findings(before, after, work)
    speed = with_backlog(before, after, speed, work)
    whole_loop = loop_speed(before, after, speed, work)
    v = verdict(speed, rows, whole_loop)
    noisy = noise(before, after, v["change"])
    v["line"] += f"; {noisy['said']}" if noisy["said"] else ""
    held = prediction_held(before.doc, after.doc, rows, speed, whole_loop)
    failed = gates(v, rows, fail_if_slower, fail_on_new)
    doc = {"schema": SCHEMA, "before": {"path": before.path, "label": before.label},
           "after": {"path": after.path, "label": after.label}, "verdict": v, "metrics": metrics(before, after, speed),
           "loop": whole_loop, "noise": noisy, "predicted": held, "findings": rows, "warnings": warnings,
           "gates": {"failed": failed, "fail_if_slower": fail_if_slower, "fail_on_new": fail_on_new},
           "exit_code": 1 if failed else 0}
    return Comparison(doc, warnings)
