"""The rule registries against the docs: every rule id the code produces is in docs/json-schema.md's table of its
family, and every id there is a rule class's; a new rule is one class on rules.base.Rule, listed in its registry,
and shows in the diagnosis of a real trace (and in the docs check, until `python tools/rule_tables.py` writes its row
from its own fires_when and suggests: the committed tables are the ones rules/rule_table.py makes). Each family declares
whether its rules are exclusive (one verdict: the first that fires) or not (every finding), and base.fired applies it."""
import re
from pathlib import Path

import pytest

from nsys_transfer.analysis import Trace, facade
from nsys_transfer.analysis.rules import capture_checks, diagnosis, ranks, rule_table, scaling
from nsys_transfer.analysis.rules.base import Context, Finding, Rule, fired
from nsys_transfer.analysis.summary import Options, analyze_sections

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "json-schema.md"
TRACE = ROOT / "tests" / "data" / "programs" / "seg_logits_fixed_nsys2024.sqlite.xz"
X2 = ROOT / "reports" / "data" / "h200x2" / "pinned-x2.sqlite.xz"  # one nsys capture of two ranks on 2 x H200

# family -> (the heading of its section in docs/json-schema.md, the registry's module and name)
FAMILIES = {"diagnosis": ("## Diagnosis: the findings contract", diagnosis, "RULES"),
            "ranks": ("### Multi-GPU rules", ranks, "RANK_RULES"),
            "scaling": ("### Scaling rules", scaling, "SCALING_RULES")}
# family -> whether its rules are exclusive: diagnosis gives every finding, the others one verdict each
EXCLUSIVE = {"diagnosis": False, "ranks": True, "scaling": True}


def documented(heading: str, text: str | None = None) -> list[str]:
    """The rule ids in the first column of the `| rule | ...` table under the heading that starts with `heading`."""
    lines = (DOCS.read_text() if text is None else text).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    header = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("| rule |", "#")))
    assert lines[header].startswith("| rule |"), f"no `| rule |` table under {heading!r} in {DOCS.name}"
    ids = []
    for line in lines[header + 2:]:  # past the header and its |---| row
        if not line.startswith("|"):
            break
        m = re.match(r"^\| `([a-z0-9-]+)` \|", line)
        assert m, f"{DOCS.name}: a row of the {heading!r} table without a `rule-id` first: {line[:80]}"
        ids.append(m.group(1))
    return ids


def registry(family: str) -> list[Rule]:
    _, module, name = FAMILIES[family]
    return getattr(module, name)


def mismatch(family: str, text: str | None = None) -> tuple[set[str], set[str]]:
    """(ids the code produces that the docs' table lacks, ids in the table no rule class produces)."""
    code = {rule.id for rule in registry(family)}
    docs = set(documented(FAMILIES[family][0], text))
    return code - docs, docs - code


@pytest.mark.parametrize("family", FAMILIES)
def test_every_rule_declares_the_rule_interface(family):
    rules = registry(family)
    assert rules and all(isinstance(rule, Rule) for rule in rules)
    for rule in rules:
        assert isinstance(rule.id, str) and rule.id, type(rule).__name__
        assert isinstance(rule.first, bool) and isinstance(rule.exclusive, bool), type(rule).__name__
        assert type(rule).check is not Rule.check, f"{type(rule).__name__} does not define check()"
        assert rule.fires_when and rule.suggests, f"{type(rule).__name__}: no row for the docs' table"
    ids = [rule.id for rule in rules]
    assert len(ids) == len(set(ids)), f"{family}: an id given twice: {ids}"


def test_only_the_capture_notes_come_first():
    assert [rule.id for rule in diagnosis.RULES if rule.first] == ["failed-run", "incomplete-trace",
                                                                    "too-little-to-judge"]
    assert not any(rule.first for rule in ranks.RANK_RULES + scaling.SCALING_RULES)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_declares_its_exclusivity(family):
    assert {rule.exclusive for rule in registry(family)} == {EXCLUSIVE[family]}, family


class Says(Rule[int]):
    """A toy rule over an int context: fires (one finding naming itself) when the context is at least `at`."""

    def __init__(self, id: str, at: int = 0, exclusive: bool = False):
        self.id, self.at, self.exclusive = id, at, exclusive

    def check(self, ctx: int) -> list[Finding]:
        """One finding when ctx reaches `at`."""
        return [Finding(self.id, "info", 0, 0.0, None, "", "")] if ctx >= self.at else []


def test_fired_stops_after_the_first_exclusive_rule_that_fires():
    rules = [Says("a"), Says("b", at=5, exclusive=True), Says("c", exclusive=True), Says("d")]
    assert [f.rule for _, f in fired(rules, 0)] == ["a", "c"]  # b does not fire: c, the next exclusive one, ends it
    assert [f.rule for _, f in fired(rules, 5)] == ["a", "b"]
    assert [f.rule for _, f in fired([Says("a"), Says("b"), Says("c", at=9)], 0)] == ["a", "b"]  # none exclusive: all
    assert [r.id for r, _ in fired(rules[:1], 0)] == ["a"]  # (rule, finding) pairs


class Ahead(Rule[ranks.RankContext]):
    """A new multi-GPU rule, written as one class: exclusive, it fires on any GPUs and names the idlest."""
    id = "ahead"
    exclusive = True

    def check(self, ctx: ranks.RankContext) -> list[Finding]:
        """This rule's finding for the GPUs."""
        return [ctx.finding(self.id, f"{ctx.n} GPUs, listed ahead", "nothing")]


def _x2_limit() -> tuple[dict, list[str]]:
    """The multi-GPU limit of the 2-GPU capture as analyze-trace reports it, and the rules of its diagnosis."""
    doc = facade.analyze(X2, Options()).summary
    return doc["ranks"]["limit"], [f["rule"] for f in doc["diagnosis"]]


def test_an_exclusive_rule_ahead_of_the_rank_rules_wins_on_a_real_two_gpu_trace(monkeypatch):
    limit, rules = _x2_limit()
    assert limit["rule"] == "gpu-compute" and "gpu-compute" in rules  # the premise: as the code stands
    with monkeypatch.context() as m:
        m.setattr(ranks, "RANK_RULES", [Ahead(), *ranks.RANK_RULES])
        limit, rules = _x2_limit()
        assert mismatch("ranks") == ({"ahead"}, set())
    assert limit["rule"] == "ahead" and limit["evidence"] == "2 GPUs, listed ahead" and limit["subject"]
    assert "ahead" in rules and "gpu-compute" not in rules  # it fired first, so no other rank rule was asked
    assert mismatch("ranks") == (set(), set())


@pytest.mark.parametrize("family", rule_table.FAMILIES)
def test_the_docs_table_is_the_one_the_rules_declare(family):
    assert rule_table.FAMILIES[family].heading == FAMILIES[family][0]
    assert rule_table.written(DOCS.read_text(), family) == rule_table.table(family), \
        f"{DOCS.name}'s {family} table is not the rules' own: run `python tools/rule_tables.py`"


def test_a_threshold_in_the_docs_is_the_rules_own(monkeypatch):
    monkeypatch.setattr(ranks.GpuCompute, "busy", 0.75)
    assert "every GPU's kernels >= 75% of its window" in "\n".join(rule_table.table("ranks"))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_docs_table_lists_every_rule_and_no_other(family):
    undocumented, unknown = mismatch(family)
    assert not undocumented, f"{family} rules missing from {DOCS.name}'s table: {sorted(undocumented)}"
    assert not unknown, f"{DOCS.name}'s {family} table lists ids no rule class produces: {sorted(unknown)}"
    ids = documented(FAMILIES[family][0])
    assert len(ids) == len(set(ids)), f"{DOCS.name}: a {family} rule listed twice: {ids}"


def test_the_docs_check_fails_on_a_row_taken_out():
    text = DOCS.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `host-sync` |"))
    assert mismatch("diagnosis", text.replace(row + "\n", "")) == ({"host-sync"}, set())
    renamed = text.replace("| `nvtx-missing` |", "| `no-nvtx` |")
    assert mismatch("diagnosis", renamed) == ({"nvtx-missing"}, {"no-nvtx"})


def test_integrity_checks_have_no_rule_ids():
    """The integrity checks give one verdict (`trace.integrity`), not findings: no ids to document. Should they get
    ids, they belong in this file's FAMILIES and a table of docs/json-schema.md."""
    assert not any(hasattr(check, "id") for check in capture_checks.CHECKS)


class WindowNote(Rule[Context]):
    """A new rule, written as one class: a note on every trace with GPU work, naming its window."""
    id = "window-note"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's finding; empty without a window."""
        if not ctx.window_ns():
            return []
        return [ctx.finding(self.id, 0, None, f"the window is {ctx.window_ns():,} ns", "nothing", severity="info")]


class TrustNote(WindowNote):
    """The same, as a capture-trust note (first): listed first, and kept though it costs nothing (low, 0 ns)."""
    id = "trust-note"
    first = True

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's finding, low and costing nothing."""
        return [ctx.finding(self.id, 0, None, "a note on the capture", "nothing", severity="low")]


def test_a_new_rule_is_one_class_in_the_output_and_in_the_docs_check(monkeypatch):
    before = [rule.id for rule in diagnosis.RULES]
    with monkeypatch.context() as m:
        m.setattr(diagnosis, "RULES", [*diagnosis.RULES, WindowNote(), TrustNote()])
        with Trace.open(TRACE) as t:
            summary = analyze_sections(t).summary
        assert mismatch("diagnosis") == ({"window-note", "trust-note"}, set())
    found = summary["diagnosis"]
    rules = [f["rule"] for f in found]
    note = next(f for f in found if f["rule"] == "window-note")
    assert note["evidence"] == f"the window is {summary['window']['duration_ns']:,} ns" and note["severity"] == "info"
    # the first-listed note leads every finding of a rule that is not first, and is kept at 0 ns
    others = [i for i, f in enumerate(found) if f["rule"] not in ("incomplete-trace", "trust-note")]
    assert others and rules.index("trust-note") < min(others), rules
    # nothing leaks: the registry and the docs check are the code's own again
    assert [rule.id for rule in diagnosis.RULES] == before and mismatch("diagnosis") == (set(), set())
