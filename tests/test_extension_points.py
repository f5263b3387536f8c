"""The analysis's doors (issue 50): a new idle cause, a new rule and a new section are each one declaration in one
place, and show in a real trace's answer: each is added here as a toy, in the test alone, and taken out after."""
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from nsys_transfer.analysis import Trace, facade
from nsys_transfer.analysis.common import idle_causes
from nsys_transfer.analysis.common.idle_causes import INPUT, IdleCause
from nsys_transfer.analysis.common.schema import Part
from nsys_transfer.analysis.render import palette
from nsys_transfer.analysis.rules import diagnosis
from nsys_transfer.analysis.rules.base import Context, Finding, Rule
from nsys_transfer.analysis.sections import base, copies, kernels
from nsys_transfer.analysis.sections.base import declare
from nsys_transfer.analysis.document import Document
from nsys_transfer.analysis.document.breakdown import time_breakdown
from nsys_transfer.analysis.summary import analyze_sections

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "json-schema.md"
TRACE = ROOT / "tests" / "data" / "programs" / "seg_logits_fixed_nsys2024.sqlite.xz"  # its loop waits in poll: 0.5 s


def _analysis():
    with Trace.open(TRACE) as t:
        return analyze_sections(t)


@pytest.fixture(scope="module")
def before():
    return _analysis().summary


# a toy idle cause: the launching thread in poll(), ahead of `input`, which held that time before
POLL = IdleCause("poll-wait", "poll-wait", "idle: polling", "#123456", "the launching thread in poll()",
                 fix="wait on an event instead of polling", calls=re.compile(r"^poll$"))


def test_a_new_idle_cause_is_one_declaration(before):
    idle_causes.register(POLL, before=INPUT)
    try:
        a = _analysis()
        legend, color, keys = palette.key_label(POLL.name), palette.color(POLL.name), palette.keys()
        parts, key = time_breakdown(Document.from_json(a.summary)), palette.part_key("idle: polling")
    finally:
        idle_causes.unregister(POLL.name)
    s = a.summary
    causes = {c["cause"]: c["idle_ns"] for c in s["idle"]["causes"]}
    was = {c["cause"]: c["idle_ns"] for c in before["idle"]["causes"]}
    assert causes[POLL.name] > 0.1 * s["window"]["duration_ns"]  # the poll time, which was input's
    assert causes.get(INPUT.name, 0) < was[INPUT.name]
    assert sum(causes.values()) == sum(was.values())  # every idle nanosecond still given to one cause
    found = next(f for f in s["diagnosis"] if f["rule"] == "poll-wait")  # its generic rule, from its declaration
    assert found["suggestion"] == POLL.fix and "in poll()" in found["evidence"]
    assert found["impact_ns"] == causes[POLL.name]
    assert legend == "idle: poll-wait" and color == "#123456" and POLL.name in keys
    assert ("idle: polling", causes[POLL.name]) in parts and key == POLL.name
    # taken out again: the answer is the one before
    assert POLL.name not in idle_causes.names() and _analysis().summary == before


def test_the_docs_name_every_idle_cause_in_order():
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith("| `idle` | object"))
    at = [row.find(f"cause `{c.name}`" if i == 0 else f"`{c.name}` (") for i, c in enumerate(idle_causes.CAUSES)]
    assert -1 not in at and at == sorted(at), list(zip(idle_causes.names(), at))


class StepNote(Rule[Context]):
    """A toy rule, one class: a note naming how many steps the trace has and the shortest gap counted."""
    id = "step-note"

    def check(self, ctx: Context) -> list[Finding]:
        """One note on every trace."""
        return [ctx.finding(self.id, 0, None, f"{ctx.steps()} steps, gaps from {ctx.min_gap_ns} ns", "nothing",
                            severity="info")]


def test_a_new_rule_is_one_class(monkeypatch, before):
    monkeypatch.setattr(diagnosis, "RULES", [*diagnosis.RULES, StepNote()])
    found = [f for f in _analysis().summary["diagnosis"] if f["rule"] == "step-note"]
    assert [f["evidence"] for f in found] == [f"{before['steps']['count'] or 0} steps, gaps from 1000000 ns"]


X2 = ROOT / "reports" / "data" / "h200x2" / "pinned-x2.sqlite.xz"  # one capture of two GPUs: the multi-GPU path


@dataclass(frozen=True, kw_only=True)
class CopyShare:
    """A toy section's typed value: the copies' time beside the kernels'."""
    copy_ns: int
    kernel_ns: int


def test_a_new_section_is_one_declaration_on_one_gpu_and_on_several(before):
    """A toy section placed by its own declaration (between `kernels` and `nvtx`): it reads the Parts it needs typed,
    and its own typed value, which Document has no field for, rides in the document as an extra Part
    (document.ExtraPart) in the place its declaration gives it: in the JSON of a one-GPU trace and of a two-GPU one."""
    def copy_share(memcpy: Part, kernels: Part) -> Part:
        copy = sum(d.total_ns for d in (memcpy.summary.dtoh, memcpy.summary.htod, memcpy.summary.dtod))
        return Part(CopyShare(copy_ns=copy, kernel_ns=kernels.summary.total_ns),
                    {"copy_share": pd.DataFrame({"ns": [copy]})})
    declare(copy_share, needs=(copies.memcpy_part, kernels.kernels_part), part="copy_share", json_at=75, tables_at=75)
    try:
        one = facade.analyze(TRACE)
        two = facade.analyze(X2)
    finally:
        base.remove(copy_share)
    for r in (one, two):
        keys = list(r.summary)
        assert keys[keys.index("kernels") + 1:keys.index("nvtx")] == ["copy_share"]
        assert r.summary["copy_share"]["kernel_ns"] == r.summary["kernels"]["total_ns"]
        (extra,) = r.doc.extra
        assert (extra.key, extra.after) == ("copy_share", "kernels") and extra.value.kernel_ns == r.doc.kernels.total_ns
    assert two.ranks is not None and len(two.summary["ranks"]["gpus"]) == 2
    names = list(one.tables)
    assert names.index("copy_share") == names.index("nvtx_summary") - 1  # its tables before nvtx's (at 80)
    assert "copy_share" not in base.section_keys() and facade.analyze(TRACE).summary == before
