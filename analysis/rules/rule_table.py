"""The docs' tables of rules (docs/json-schema.md: diagnosis, multi-GPU, scaling), made from the rules' own
declarations: each row is a rule's id, `fires_when` and `suggests` (rules/base.Rule), its thresholds filled in from
its attributes. A new rule is its class and its place in its registry; `python tools/rule_tables.py` writes the
tables, and tests/test_rule_registry.py holds the committed ones to these."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import diagnosis, ranks, scaling
from .base import Rule


@dataclass(frozen=True)
class Family:
    """A family of rules in the docs: the heading its table sits under (its start), the table's two columns after
    the rule's id, and the family's rules in their order (read when asked: a registry may be changed meanwhile)."""
    heading: str
    columns: tuple[str, str]
    rules: Callable[[], Sequence[Rule]]


FAMILIES = {
    "diagnosis": Family("## Diagnosis: the findings contract", ("fires when (impact)", "suggests"), diagnosis.rules),
    "ranks": Family("### Multi-GPU rules", ("fires when (threshold)", "suggests"), lambda: ranks.RANK_RULES),
    "scaling": Family("### Scaling rules", ("fires when", "evidence"), lambda: scaling.SCALING_RULES),
}


def row(rule: Rule) -> str:
    """A rule's row: its id, when it fires and what it suggests, its thresholds filled in."""
    return f"| `{rule.id}` | {rule.fires_when.format(rule=rule)} | {rule.suggests.format(rule=rule)} |"


def table(family: str) -> list[str]:
    """The family's table, line by line: its header, its |---| row and a row per rule."""
    f = FAMILIES[family]
    return [f"| rule | {f.columns[0]} | {f.columns[1]} |", "|---|---|---|", *(row(r) for r in f.rules())]


def span(lines: list[str], family: str) -> tuple[int, int]:
    """Where the family's table lies in the docs' lines: [first, end) from its `| rule |` header, the first table
    under its heading, to its last row."""
    start = next(i for i, line in enumerate(lines) if line.startswith(FAMILIES[family].heading))
    first = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("| rule |"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    return first, end


def written(text: str, family: str) -> list[str]:
    """The family's table as the docs' text holds it."""
    lines = text.splitlines()
    first, end = span(lines, family)
    return lines[first:end]


def with_tables(text: str) -> str:
    """The docs' text with each family's table made anew from its rules."""
    lines = text.splitlines()
    for family in FAMILIES:
        first, end = span(lines, family)
        lines[first:end] = table(family)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")
