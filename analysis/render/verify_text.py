"""verify's comparison as text (`nsys-transfer verify`, and the report's before/after section): the verdict first and
last, the figures, the prediction held, then every finding. Pure: dict in, str out."""
from __future__ import annotations

from .formats import ms, wrapped
from ..rules import prediction
from ..verify import finding_name


def _verify_cell(v, unit: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:,.1f}{'%' if unit == '%' else ''}" if abs(v) >= 10 or unit == "%" else f"{v:,.3g}"


def verify_report(doc: dict) -> str:
    """The comparison as text: the verdict first and last, the figures, then the findings."""
    v = doc["verdict"]
    lines = [wrapped(f"VERDICT: {v['line']}"), f"before: {doc['before']['path']}", f"after:  {doc['after']['path']}"]
    lines += [f"warning: {w}" for w in doc["warnings"]]
    lines.append(f"\n{'figure':<28} {'before':>14} {'after':>14} {'change':>13}")
    for m in doc["metrics"]:
        unit = f" ({m['unit']})" if m["unit"] and m["unit"] != "%" else ""
        lines.append(f"{(m['label'] + unit)[:28]:<28} {_verify_cell(m['before'], m['unit']):>14} {_verify_cell(m['after'], m['unit']):>14} "
                     f"{_verify_change(m):>13}")
        if m.get("note"):
            lines.append(f"  ({m['note']})")
    lines.append(f"  throughput from {doc['metrics'][0]['source']}")
    loop = doc.get("loop")
    if loop:  # the headline's loop: why it differs from the steady state, and nsys's own cost where it can bias it
        lines.append(f"  the verdict's speed-up: {loop['why']}")
        if loop["profiler_cost"].get("said"):
            lines.append(f"  profiler's cost: {loop['profiler_cost']['said']}")
    lines += verify_prediction_lines(doc.get("predicted"))
    # a line the change moved is named at both places (`my.py:37 -> my_fixed.py:27`): the column widens to hold it
    width = min(max([44, *(len(finding_name(f)) for f in doc["findings"])]), 90)
    lines.append(f"\n{'finding':<{width}} {'before':>10} {'after':>10}  status   (cost: {_verify_cost_unit(doc)})")
    for f in doc["findings"]:
        # the verdict's `new:` names the high and medium ones; a low one is said to be low here, not left to contradict it
        status = f"{f['status']} (low)" if f["status"] == "new" and f.get("after_severity") == "low" else f["status"]
        lines.append(f"{finding_name(f)[:width]:<{width}} {ms(f['before_ns']):>10} {ms(f['after_ns']):>10}  {status}")
    if not doc["findings"]:
        lines.append("(no costed finding on either side)")
    for reason in doc["gates"]["failed"]:
        lines.append(f"GATE FAILED: {reason}")
    lines.append(lines[0])
    return "\n".join(lines)


def verify_prediction_lines(h: dict | None) -> list[str]:
    """What the before side predicted for the findings the change fixed, beside what it achieved, clock by clock."""
    if not h:
        return []
    said = {"within": "as predicted", "below": "below the prediction", "above": "above the prediction"}
    which = f" ({h['which']})" if h["which"] != "it" else ""
    lines = [f"  predicted before the fix, for {', '.join(h['findings'])}{which}:"]
    for clock, where in (("whole", "over the whole loop"), ("steady", "in the steady state")):
        r, got = h.get(f"{clock}_x"), h.get(f"achieved_{clock}_x")
        if r and got is not None:
            lines.append(f"    {where}: {prediction.x_range(r)} predicted, {got:.2f}x achieved: {said[h['held'][clock]]}")
            if h["why"].get(clock):
                lines.append(f"      why: {h['why'][clock]}")
    return [wrapped(x) for x in lines]


def _verify_change(m: dict) -> str:
    """A figure's change: in percent where the ratio means something (a factor from 10x up), else in its own unit
    (points for a percentage: 47.4% -> 99.6% is +52.2 pts; a figure that grew from near zero: +1,322.4 ms)."""
    if m["change"] is not None:  # ten times or more as a factor, as the verdict's '16.70x faster': +1570% reads badly
        return f"{1 + m['change']:.1f}x" if m["change"] >= 9 else f"{100 * m['change']:+.0f}%"
    if m.get("delta") is None:
        return ""
    unit = {"%": " pts", "": ""}.get(m["unit"], f" {m['unit']}")
    return f"{m['delta']:+,.1f}{unit}" if abs(m["delta"]) >= 0.1 or not m["delta"] else f"{m['delta']:+.2g}{unit}"


def _verify_cost_unit(doc: dict) -> str:
    units = {f["cost_unit"] for f in doc["findings"]}
    return units.pop().replace("ns", "ms") if len(units) == 1 else "ms"
