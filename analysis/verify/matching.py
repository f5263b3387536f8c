"""Every costed finding of either side paired with its counterpart by rule and subject, and what became of it:
resolved, reduced, unchanged, worse, new, or a limit reached."""
from __future__ import annotations

from dataclasses import dataclass

from ..load.python_stacks import place_of
from ..rules.base import Finding
from ..document import Document
from ..sections.breakdown import main_kind
from .side import Side
from .throughput import NOT_COUNTED, Work

REDUCED, WORSE = 0.8, 1.25  # a finding's cost after / before
NOISE_SIGMAS = 3.0  # a sampled line's change within this many standard deviations of its sampling: unchanged
# findings that say what limits a program that has nothing left to fix: reaching them is the aim, not a regression
LIMITS = {"gpu-bound"}
# rules whose subject is what the finding is about (a copy direction, a range): never paired across subjects
BY_SUBJECT = {"pageable-memcpy", "gpu-idle-cpu-bound", "memory-mapping-in-gaps", "cpu-hotspot"}


@dataclass(frozen=True, kw_only=True)
class FindingRow:
    """A costed finding of either side beside its counterpart (docs/json-schema.md, verify's `findings[]`): what it is
    named by, each side's subject, what became of it, its cost per unit of work on each side (cost_unit) and
    severity, and its fix."""
    rule: str
    subject: str | None
    before_subject: str | None
    after_subject: str | None
    status: str
    cost_unit: str
    before_ns: float | None
    after_ns: float | None
    before_severity: str | None
    after_severity: str | None
    suggestion: str


def findings(before: Side, after: Side, work: Work = NOT_COUNTED) -> list[FindingRow]:
    """Every costed finding of either side matched by (rule, subject): resolved, reduced, unchanged, worse or new.
    work: each side's steps or iterations (throughput.work_of): costs are per one of them, as the two may hold
    different numbers. A CPU line found after the change only, that the before side's main thread was sampled at
    under the finding threshold (Side.sampled), is paired with it by its time, never new: the change did not
    introduce it, it only outgrew the lines the change removed."""
    nb, na, per = work
    rows = []
    for fb, fa in matched(before.doc.diagnosis, after.doc.diagnosis):
        cb = fb.impact_ns / (nb or 1) if fb else None
        ca = fa.impact_ns / (na or 1) if fa else None
        seen = sampled_before(before, fa) if fb is None else None
        if seen:
            cb = seen["ns"] / (nb or 1)
        key = _either(fb, fa).rule, _subject(fb, cb, fa, ca, seen)
        if key[0] in LIMITS:
            status = "limit reached" if fa else "limit left"
        elif fb is None and not seen:
            status = "unchanged" if _was_there(before.doc, fa) else "new"
        elif fa is None:
            status = "resolved"
        else:
            status = _status(cb, ca, _noise(before, after, cb, ca, work) if key[0] == "cpu-hotspot" else 0.0)
            status = "grown" if seen and status == "worse" else status  # under the before side's finding threshold
        rows.append(FindingRow(rule=key[0], subject=key[1], before_subject=fb.subject if fb else
                               (seen and place_of(seen["file"], seen["line"], seen["function"])),
                               after_subject=fa and fa.subject, status=status, cost_unit=f"ns {per}",
                               before_ns=cb, after_ns=ca, before_severity=fb and fb.severity,
                               after_severity=fa and fa.severity, suggestion=_either(fa, fb).suggestion))
    return rows


def _status(cb: float, ca: float, noise: float) -> str:
    """reduced, worse or unchanged by the cost's ratio; unchanged too where the two differ by no more than noise."""
    if abs(ca - cb) <= noise:
        return "unchanged"
    ratio = ca / cb if cb else (1.0 if not ca else float("inf"))
    return "reduced" if ratio < REDUCED else "worse" if ratio > WORSE else "unchanged"


def _noise(before: Side, after: Side, cb: float, ca: float, work: Work) -> float:
    """How far a sampled line's two costs (per unit of work) can differ by the sampling alone: NOISE_SIGMAS standard
    deviations of the difference of two counts of samples (a count of n samples spreads by about sqrt(n)), in ns per
    unit of work; 0 where a side's sampling period is unknown."""
    periods = [(s.sampled or {}).get("period_ns") for s in (before, after)]
    if not all(periods):
        return 0.0
    var = 0.0
    for cost, n, period in ((cb, work.before or 1, periods[0]), (ca, work.after or 1, periods[1])):
        var += (cost * n / period) * (period / n) ** 2  # samples, each worth period / n per unit of work
    return NOISE_SIGMAS * var ** 0.5


def _either(first: Finding | None, second: Finding | None) -> Finding:
    """The first of a pair's two findings that is there: a pair always holds one."""
    f = first or second
    assert f is not None, "a pair of findings holds at least one"
    return f


def _subject(fb: Finding | None, cb: float | None, fa: Finding | None, ca: float | None,
             seen: dict | None = None) -> str | None:
    """The subject a pair of findings is named by: the same whichever trace is given first (input-bound's top call
    can differ between the sides, 'DataLoader' before and 'poll' after): the costlier side's, else the first of the
    two by name. A line of the program at two places (the fix moved it, or is a copy under another name) is named by
    both, before's first: `my.py:37 -> my_fixed.py:27`."""
    if fa and fa.line and (fb or seen):
        place_b = fb.subject if fb else place_of(seen["file"], seen["line"], seen["function"])
        return fa.subject if place_b == fa.subject else f"{place_b} -> {fa.subject}"
    if not (fb and fa) or fb.subject == fa.subject:
        return _either(fb, fa).subject
    if (cb or 0) != (ca or 0):
        return fb.subject if (cb or 0) > (ca or 0) else fa.subject
    return min(fb.subject or "", fa.subject or "") or None


def _was_there(before: Document, f: Finding) -> bool:
    """Whether the before side already had what a finding of the after side is about, below its noise floor or in
    figures: a pageable copy direction whose copies were already pageable is not new."""
    if f.rule == "pageable-memcpy" and before.memcpy and f.subject in ("DtoH", "HtoD"):
        return main_kind(before.memcpy.dtoh if f.subject == "DtoH" else before.memcpy.htod) == "Pageable"
    return False


def matched(before: tuple[Finding, ...], after: tuple[Finding, ...]) -> list[tuple[Finding | None, Finding | None]]:
    """Costed findings paired by rule and subject; then what is left of one rule on each side, pair by pair (the
    subject of input-bound or host-sync is the top call, which can change while the finding is the same one)."""
    b = [f for f in before if f.severity != "info"]
    a = [f for f in after if f.severity != "info"]
    pairs: list[tuple[Finding | None, Finding | None]] = []
    for fb in list(b):
        fa = next((f for f in a if (f.rule, f.subject) == (fb.rule, fb.subject) or _same_line(fb, f)), None)
        if fa is not None:
            pairs.append((fb, fa))
            b.remove(fb)
            a.remove(fa)
    for fb in list(b):
        # a subject-bound rule still pairs where one side could not name its subject (a capture without CPU samples
        # says gpu-idle-cpu-bound with none): 'resolved: X' beside 'new: X' would contradict itself
        fa = next((f for f in a if f.rule == fb.rule and (f.rule not in BY_SUBJECT or
                                                          None in (f.subject, fb.subject))), None)
        pairs.append((fb, fa))
        if fa is not None:
            a.remove(fa)
    return pairs + [(None, fa) for fa in a]


def _same_line(fb: Finding, fa: Finding) -> bool:
    """A CPU-only line found on both sides under another place: the same function's same source text (a fix moved it
    down the file, or the fixed program is a copy under another name, my.py and my_fixed.py), or the same function's
    call into the same library code (`logits = model(x).numpy()` become `outputs.submit(s, model(x))`: the time is the
    model's on both sides)."""
    lb, la = fb.line, fa.line
    if not (fb.rule == fa.rule == "cpu-hotspot" and lb and la) or lb.function != la.function:
        return False
    callee_b, callee_a = lb.path[1:], la.path[1:]
    return same_code(lb.code, la.code) or (bool(callee_b) and callee_b == callee_a and
                                           not any(".py:" in step for step in callee_b))


def same_code(b: str, a: str) -> bool:
    """Two lines' source texts are the same statement: alike but for spaces and a trailing comment."""
    return _code_key(b) == _code_key(a) != ""


def _code_key(code: str) -> str:
    return "".join(code.split("  #")[0].split())


def sampled_before(before: Side, fa: Finding | None) -> dict | None:
    """The line the before side's main thread was sampled at (Side.sampled: under the finding threshold too) that an
    after side's cpu-hotspot finding is: the same function's same source text, in whichever file (the fixed
    program is often a copy under another name); None where there is none."""
    la = fa.line if fa else None
    if not la or not before.sampled or fa.rule != "cpu-hotspot":
        return None
    return next((x for x in before.sampled["lines"] if x["function"] == la.function and
                 same_code(x["code"], la.code)), None)


def finding_name(f: FindingRow | Finding) -> str:
    """'rule (subject)', or the rule alone (a row of the comparison, or a side's finding)."""
    return f"{f.rule} ({f.subject})" if f.subject else f.rule
