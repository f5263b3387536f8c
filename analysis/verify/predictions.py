"""The before side's prediction held to what the fix achieved (issue 56): what fixing the findings the change
resolved or reduced was predicted to buy (rules/prediction.py), the speed-up achieved, and why they differ."""
from __future__ import annotations

from dataclasses import dataclass

from ..document import Document
from ..rules.prediction import Prediction
from .loop import LoopSpeed
from .matching import FindingRow, finding_name
from .throughput import Speed

HELD_MARGIN = 0.20  # an achieved speed-up this far outside the predicted range still held it (issue 56's measure)


@dataclass(frozen=True, kw_only=True)
class ByClock:
    """One word or line for each clock: the steady state's and the whole loop's."""
    steady: str | None
    whole: str | None


@dataclass(frozen=True, kw_only=True)
class PredictionHeld:
    """The before side's prediction beside what the fix achieved (verify's `predicted`): the findings it is for and
    which prediction (`it`, `all of them`, `each alone`), the predicted ranges, the speed-ups achieved, whether each
    held (`within`, `below`, `above`) and why not."""
    findings: tuple[str, ...]
    which: str
    steady_x: tuple[float, float] | None
    whole_x: tuple[float, float] | None
    achieved_steady_x: float | None
    achieved_whole_x: float | None
    held: ByClock
    why: ByClock


def prediction_held(before: Document, after: Document, rows: list[FindingRow], speed: Speed,
                    whole_loop: LoopSpeed | None) -> PredictionHeld | None:
    """The before side's prediction for the findings the fix resolved or reduced (rules/prediction.py), beside the
    speed-up achieved, and why the two differ where they do; None where the before side predicted nothing for them.
    Several findings fixed: what fixing all of them was predicted to buy where they are all its predicted ones, else
    the largest single one's, a floor."""
    fixed = [r for r in rows if r.status in ("resolved", "reduced") and r.before_severity]
    preds = {(f.rule, f.subject): f.prediction for f in before.diagnosis}
    mine = [(r, preds.get((r.rule, r.before_subject))) for r in fixed]
    said = [(r, p) for r, p in mine if p and p.said]
    if not said:
        return None
    predicted_all = [f for f in before.diagnosis if f.prediction and f.prediction.said]
    overall = before.predicted.all_fixed if before.predicted else None
    if len(said) > 1 and overall and len(said) == len(predicted_all):
        chosen, what = overall, "all of them"
    else:
        chosen = max((p for _, p in said), key=lambda p: (p.steady or p.whole or (0.0, 0.0))[1])
        what = "each alone" if len(said) > 1 else "it"
    steady = speed.after / speed.before if speed.before and speed.after else None
    whole = whole_loop.after / whole_loop.before if whole_loop and whole_loop.before and whole_loop.after else None
    held = ByClock(steady=_held(chosen.steady, steady), whole=_held(chosen.whole, whole))
    why = ByClock(steady=_why_held(held.steady, chosen, after, rows),
                  whole=whole_loop.why if whole_loop and held.whole in ("below", "above") else None)
    return PredictionHeld(findings=tuple(finding_name(r) for r, _ in said), which=what, steady_x=chosen.steady,
                          whole_x=chosen.whole, achieved_steady_x=steady, achieved_whole_x=whole, held=held, why=why)


def _held(r: tuple[float, float] | None, x: float | None) -> str | None:
    """'within', 'below' or 'above' the range (HELD_MARGIN of it counts as within); None without both."""
    if not r or x is None:
        return None
    if r[0] * (1 - HELD_MARGIN) <= x <= r[1] * (1 + HELD_MARGIN):
        return "within"
    return "below" if x < r[0] else "above"


def _why_held(held: str | None, p: Prediction, after: Document, rows: list[FindingRow]) -> str | None:
    """Why the achieved speed-up left the predicted range: what limits the after side (the next limit came sooner
    than the replay put it), or what else the change removed."""
    if held in (None, "within"):
        return None
    costed = [f for f in after.diagnosis if f.severity in ("high", "medium")]
    if held == "below":
        if costed:
            top = costed[0]
            return (f"the next limit came sooner: {finding_name(top)} holds {100 * top.impact_fraction:.0f}% of the "
                    f"GPU's time after the fix, where the replay had {p.next_limit or 'nothing'} binding next")
        return "the after side has no costed finding: its GPU work itself grew (look at the kernels' time)"
    others = [finding_name(r) for r in rows if r.status in ("resolved", "reduced") and not r.before_severity]
    more = [finding_name(r) for r in rows if r.status in ("resolved", "reduced")]
    return (f"the change did more than the predicted fix: {', '.join(others or more)} went too, or the fix's new home "
            "(workers, a side stream) was faster than the replay's low end assumed")
