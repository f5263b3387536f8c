"""The before side's prediction held to what the fix achieved (issue 56): what fixing the findings the change
resolved or reduced was predicted to buy (rules/prediction.py), the speed-up achieved, and why they differ."""
from __future__ import annotations

from ..document import Document
from ..rules.prediction import Prediction, name_of
from .matching import finding_name

HELD_MARGIN = 0.20  # an achieved speed-up this far outside the predicted range still held it (issue 56's measure)


def prediction_held(before: Document, after: Document, rows: list[dict], speed: dict, whole_loop: dict | None) -> dict | None:
    """The before side's prediction for the findings the fix resolved or reduced (rules/prediction.py), beside the
    speed-up achieved, and why the two differ where they do; None where the before side predicted nothing for them.
    Several findings fixed: what fixing all of them was predicted to buy where they are all its predicted ones, else
    the largest single one's, a floor."""
    fixed = [r for r in rows if r["status"] in ("resolved", "reduced") and r["before_severity"]]
    preds = {(f.rule, f.subject): f.prediction for f in before.diagnosis}
    mine = [(r, preds.get((r["rule"], r["before_subject"]))) for r in fixed]
    mine = [(r, p) for r, p in mine if p and p.said]
    if not mine:
        return None
    predicted_all = [f for f in before.diagnosis if f.prediction and f.prediction.said]
    overall = before.predicted.all_fixed if before.predicted else None
    if len(mine) > 1 and overall and len(mine) == len(predicted_all):
        chosen, what = overall, "all of them"
    else:
        chosen = max((p for _, p in mine), key=lambda p: (p.steady or p.whole)[1])
        what = "each alone" if len(mine) > 1 else "it"
    steady = speed["after"] / speed["before"] if speed.get("before") and speed.get("after") else None
    whole = whole_loop["after"] / whole_loop["before"] if whole_loop and whole_loop.get("before") and \
        whole_loop.get("after") else None
    held = {"steady": _held(chosen.steady, steady), "whole": _held(chosen.whole, whole)}
    why = {"steady": _why_held(held["steady"], chosen, after, rows),
           "whole": (whole_loop or {}).get("why") if held["whole"] in ("below", "above") else None}
    return {"findings": [finding_name(r) for r, _ in mine], "which": what, "steady_x": _listed(chosen.steady),
            "whole_x": _listed(chosen.whole), "achieved_steady_x": steady, "achieved_whole_x": whole, "held": held,
            "why": why}


def _listed(r: tuple[float, float] | None) -> list[float] | None:
    """A predicted range as its JSON writes it (the document's list)."""
    return None if r is None else list(r)


def _held(r: tuple[float, float] | None, x: float | None) -> str | None:
    """'within', 'below' or 'above' the range (HELD_MARGIN of it counts as within); None without both."""
    if not r or x is None:
        return None
    if r[0] * (1 - HELD_MARGIN) <= x <= r[1] * (1 + HELD_MARGIN):
        return "within"
    return "below" if x < r[0] else "above"


def _why_held(held: str | None, p: Prediction, after: Document, rows: list[dict]) -> str | None:
    """Why the achieved speed-up left the predicted range: what limits the after side (the next limit came sooner
    than the replay put it), or what else the change removed."""
    if held in (None, "within"):
        return None
    costed = [f for f in after.diagnosis if f.severity in ("high", "medium")]
    if held == "below":
        if costed:
            top = costed[0]
            return (f"the next limit came sooner: {name_of(top)} holds {100 * top.impact_fraction:.0f}% of the "
                    f"GPU's time after the fix, where the replay had {p.next_limit or 'nothing'} binding next")
        return "the after side has no costed finding: its GPU work itself grew (look at the kernels' time)"
    others = [finding_name(r) for r in rows if r["status"] in ("resolved", "reduced") and not r.get("before_severity")]
    more = [finding_name(r) for r in rows if r["status"] in ("resolved", "reduced")]
    return (f"the change did more than the predicted fix: {', '.join(others or more)} went too, or the fix's new home "
            "(workers, a side stream) was faster than the replay's low end assumed")
