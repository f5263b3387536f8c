"""verify's comparison as text (`nsys-transfer verify`, and the report's before/after section): the verdict first and
last, the figures, the prediction held, then every finding. Pure: the typed comparison (verify.VerifyDocument) in, str
out."""
from __future__ import annotations

from .formats import ms, wrapped
from ..rules import prediction
from ..verify import VerifyDocument, finding_name
from ..verify.metrics import MetricRow
from ..verify.predictions import PredictionHeld


def _verify_cell(v, unit: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:,.1f}{'%' if unit == '%' else ''}" if abs(v) >= 10 or unit == "%" else f"{v:,.3g}"


def verify_report(doc: VerifyDocument) -> str:
    """The comparison as text: the verdict first and last, the figures, then the findings."""
    lines = [wrapped(f"VERDICT: {doc.verdict.line}"), f"before: {doc.before.path}", f"after:  {doc.after.path}"]
    lines += [f"warning: {w}" for w in doc.warnings]
    lines.append(f"\n{'figure':<28} {'before':>14} {'after':>14} {'change':>13}")
    for m in doc.metrics:
        unit = f" ({m.unit})" if m.unit and m.unit != "%" else ""
        lines.append(f"{(m.label + unit)[:28]:<28} {_verify_cell(m.before, m.unit):>14} {_verify_cell(m.after, m.unit):>14} "
                     f"{_verify_change(m):>13}")
        if m.note:
            lines.append(f"  ({m.note})")
    lines.append(f"  throughput from {doc.metrics[0].source}")
    loop = doc.loop
    if loop:  # the headline's loop: why it differs from the steady state, and nsys's own cost where it can bias it
        lines.append(f"  the verdict's speed-up: {loop.why}")
        if loop.profiler_cost.said:
            lines.append(f"  profiler's cost: {loop.profiler_cost.said}")
    lines += verify_prediction_lines(doc.predicted)
    # a line the change moved is named at both places (`my.py:37 -> my_fixed.py:27`): the column widens to hold it
    width = min(max([44, *(len(finding_name(f)) for f in doc.findings)]), 90)
    lines.append(f"\n{'finding':<{width}} {'before':>10} {'after':>10}  status   (cost: {_verify_cost_unit(doc)})")
    for f in doc.findings:
        # the verdict's `new:` names the high and medium ones; a low one is said to be low here, not left to contradict it
        status = f"{f.status} (low)" if f.status == "new" and f.after_severity == "low" else f.status
        lines.append(f"{finding_name(f)[:width]:<{width}} {ms(f.before_ns):>10} {ms(f.after_ns):>10}  {status}")
    if not doc.findings:
        lines.append("(no costed finding on either side)")
    for reason in doc.gates.failed:
        lines.append(f"GATE FAILED: {reason}")
    lines.append(lines[0])
    return "\n".join(lines)


def verify_prediction_lines(h: PredictionHeld | None) -> list[str]:
    """What the before side predicted for the findings the change fixed, beside what it achieved, clock by clock."""
    if not h:
        return []
    said = {"within": "as predicted", "below": "below the prediction", "above": "above the prediction"}
    which = f" ({h.which})" if h.which != "it" else ""
    lines = [f"  predicted before the fix, for {', '.join(h.findings)}{which}:"]
    clocks = ((h.whole_x, h.achieved_whole_x, h.held.whole, h.why.whole, "over the whole loop"),
              (h.steady_x, h.achieved_steady_x, h.held.steady, h.why.steady, "in the steady state"))
    for r, got, held, why, where in clocks:
        if r and got is not None:
            lines.append(f"    {where}: {prediction.x_range(r)} predicted, {got:.2f}x achieved: {said[held]}")
            if why:
                lines.append(f"      why: {why}")
    return [wrapped(x) for x in lines]


def _verify_change(m: MetricRow) -> str:
    """A figure's change: in percent where the ratio means something (a factor from 10x up), else in its own unit
    (points for a percentage: 47.4% -> 99.6% is +52.2 pts; a figure that grew from near zero: +1,322.4 ms)."""
    if m.change is not None:  # ten times or more as a factor, as the verdict's '16.70x faster': +1570% reads badly
        return f"{1 + m.change:.1f}x" if m.change >= 9 else f"{100 * m.change:+.0f}%"
    if m.delta is None:
        return ""
    unit = {"%": " pts", "": ""}.get(m.unit, f" {m.unit}")
    return f"{m.delta:+,.1f}{unit}" if abs(m.delta) >= 0.1 or not m.delta else f"{m.delta:+.2g}{unit}"


def _verify_cost_unit(doc: VerifyDocument) -> str:
    units = {f.cost_unit for f in doc.findings}
    return units.pop().replace("ns", "ms") if len(units) == 1 else "ms"
