"""The CI gates (--fail-if-slower, --fail-on-new): why they fail, if they do."""
from __future__ import annotations

from dataclasses import dataclass

from .matching import FindingRow, finding_name
from .verdict import Verdict


@dataclass(frozen=True, kw_only=True)
class Gates:
    """The CI gates (verify's `gates`): each failed one's reason, and the gates asked for."""
    failed: tuple[str, ...]
    fail_if_slower: float | None
    fail_on_new: str | None


def gates(v: Verdict, rows: list[FindingRow], fail_if_slower: float | None, fail_on_new: str | None) -> Gates:
    """The CI gates, with the reasons they fail (none: they pass)."""
    out = []
    if fail_if_slower is not None and v.change is not None and -v.change * 100 > fail_if_slower:
        out.append(f"{-100 * v.change:.1f}% slower, more than --fail-if-slower {fail_if_slower:g}")
    if fail_on_new:
        wanted = {r.strip() for r in fail_on_new.split(",") if r.strip()}
        new = [f for f in rows if f.status == "new"]
        hit = [f for f in new if ("any" in wanted and f.after_severity in ("high", "medium")) or f.rule in wanted]
        if hit:
            out.append(f"new finding{'s' if len(hit) > 1 else ''}: {', '.join(finding_name(f) for f in hit)} "
                       f"(--fail-on-new {fail_on_new})")
    return Gates(failed=tuple(out), fail_if_slower=fail_if_slower, fail_on_new=fail_on_new)
