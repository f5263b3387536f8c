"""verify's whole comparison: the two sides checked, then their speed, figures, findings, loop, verdict, the
prediction held and the gates, assembled into one document (docs/json-schema.md, "verify"); two captures without GPU
work go to cpu.py, their loops compared by their time."""
from __future__ import annotations

from .backlog import with_backlog
from .comparability import check_comparable
from .comparison import Comparison, Found, compared
from .cpu import verify_cpu
from .loop import loop_speed
from .matching import findings
from .metrics import metrics
from .side import Side
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
    found = Found(speed=speed, rows=rows, verdict=verdict(speed, rows, whole_loop), loop=whole_loop,
                  figures=metrics(before, after, speed), warnings=warnings)
    return compared(before, after, found, fail_if_slower, fail_on_new)
