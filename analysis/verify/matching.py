"""Every costed finding of either side paired with its counterpart by rule and subject, and what became of it:
resolved, reduced, unchanged, worse, new, or a limit reached."""
from __future__ import annotations

from nsys_transfer.analysis.sections.breakdown import main_kind
from nsys_transfer.analysis.verify.side import Side
from nsys_transfer.analysis.verify.throughput import NOT_COUNTED, Work

REDUCED, WORSE = 0.8, 1.25  # a finding's cost after / before
# findings that say what limits a program that has nothing left to fix: reaching them is the aim, not a regression
LIMITS = {"gpu-bound"}
# rules whose subject is what the finding is about (a copy direction, a range): never paired across subjects
BY_SUBJECT = {"pageable-memcpy", "gpu-idle-cpu-bound", "memory-mapping-in-gaps", "cpu-hotspot"}


def findings(before: Side, after: Side, work: Work = NOT_COUNTED) -> list[dict]:
    """Every costed finding of either side matched by (rule, subject): resolved, reduced, unchanged, worse or new.
    work: each side's steps or iterations (throughput.work_of): costs are per one of them, as the two may hold
    different numbers."""
    nb, na, per = work
    rows = []
    for fb, fa in matched(before.summary["diagnosis"], after.summary["diagnosis"]):
        cb = fb["impact_ns"] / (nb or 1) if fb else None
        ca = fa["impact_ns"] / (na or 1) if fa else None
        key = (fb or fa)["rule"], _subject(fb, cb, fa, ca)
        if key[0] in LIMITS:
            status = "limit reached" if fa else "limit left"
        elif fb is None:
            status = "unchanged" if _was_there(before.summary, fa) else "new"
        elif fa is None:
            status = "resolved"
        else:
            ratio = ca / cb if cb else (1.0 if not ca else float("inf"))
            status = "reduced" if ratio < REDUCED else "worse" if ratio > WORSE else "unchanged"
        rows.append({"rule": key[0], "subject": key[1], "before_subject": fb and fb["subject"],
                     "after_subject": fa and fa["subject"], "status": status, "cost_unit": f"ns {per}",
                     "before_ns": cb, "after_ns": ca, "before_severity": fb and fb["severity"],
                     "after_severity": fa and fa["severity"], "suggestion": (fa or fb)["suggestion"]})
    return rows


def _subject(fb: dict | None, cb: float | None, fa: dict | None, ca: float | None) -> str | None:
    """The subject a pair of findings is named by: the same whichever trace is given first (input-bound's top call
    can differ between the sides, 'DataLoader' before and 'poll' after): the costlier side's, else the first of the
    two by name."""
    if not (fb and fa) or fb["subject"] == fa["subject"]:
        return (fb or fa)["subject"]
    if (cb or 0) != (ca or 0):
        return fb["subject"] if (cb or 0) > (ca or 0) else fa["subject"]
    return min(fb["subject"] or "", fa["subject"] or "") or None


def _was_there(before: dict, f: dict) -> bool:
    """Whether the before side already had what a finding of the after side is about, below its noise floor or in
    figures: a pageable copy direction whose copies were already pageable is not new."""
    if f["rule"] == "pageable-memcpy" and f["subject"] in ("DtoH", "HtoD"):
        return main_kind(before["memcpy"][f["subject"].lower()]) == "Pageable"
    return False


def matched(before: list[dict], after: list[dict]) -> list[tuple[dict | None, dict | None]]:
    """Costed findings paired by rule and subject; then what is left of one rule on each side, pair by pair (the
    subject of input-bound or host-sync is the top call, which can change while the finding is the same one)."""
    b = [f for f in before if f["severity"] != "info"]
    a = [f for f in after if f["severity"] != "info"]
    pairs = []
    for fb in list(b):
        fa = next((f for f in a if (f["rule"], f["subject"]) == (fb["rule"], fb["subject"]) or _same_line(fb, f)), None)
        if fa is not None:
            pairs.append((fb, fa))
            b.remove(fb)
            a.remove(fa)
    for fb in list(b):
        # a subject-bound rule still pairs where one side could not name its subject (a capture without CPU samples
        # says gpu-idle-cpu-bound with none): 'resolved: X' beside 'new: X' would contradict itself
        fa = next((f for f in a if f["rule"] == fb["rule"] and (f["rule"] not in BY_SUBJECT or
                                                                None in (f["subject"], fb["subject"]))), None)
        pairs.append((fb, fa))
        if fa is not None:
            a.remove(fa)
    return pairs + [(None, fa) for fa in a]


def _same_line(fb: dict, fa: dict) -> bool:
    """A CPU-only line found on both sides under another place: the same function's same source text (a fix moved it
    down the file, or the fixed program is a copy under another name, my.py and my_fixed.py)."""
    lb, la = fb.get("line"), fa.get("line")
    return fb["rule"] == fa["rule"] == "cpu-hotspot" and bool(lb and la) and \
        (lb["function"], lb["code"].strip()) == (la["function"], la["code"].strip())


def finding_name(f: dict) -> str:
    """'rule (subject)', or the rule alone."""
    return f"{f['rule']} ({f['subject']})" if f["subject"] else f["rule"]
