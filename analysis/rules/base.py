"""The findings' shared parts: the Finding record and its severity, the Rule every rule class is, the Context every
diagnosis rule reads (the analysis's typed facts, rules/facts.py, and the options), and the formatting of times and sizes in evidence."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

import pandas as pd

from ..common import defaults
from ..common.idle_causes import IdleCause
from ..common.typed_json import NOT_IN_JSON, from_json, to_json
from ..replay.fixes import Fix, NoFigure
from .advice import FIXES
from .facts import Facts, Idle, Program
from .prediction import Prediction
from ..sections.code_lines import CodeLines, CodeSite
from ..sections.timeline import Timeline

HIGH_SHARE, MEDIUM_SHARE = 0.10, 0.02


NOISE_SHARE = 0.001


SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass
class Finding:
    """One rule's verdict: what it costs (impact over the window), what it is about, the evidence and the fix."""
    rule: str
    severity: str
    impact_ns: int
    impact_fraction: float
    subject: str | None
    evidence: str
    suggestion: str
    line: CodeSite | None = None  # the program's line behind it (rules/code_advice.py)
    # the findings of one job merged into this one (rules/code_advice.py); not in the JSON
    parts: tuple["Finding", ...] = field(default=(), metadata=NOT_IN_JSON)
    prediction: Prediction | None = None  # what its fix buys, for the costed findings

    def as_dict(self) -> dict:
        """The finding as a JSON-able dict (common/typed_json.py; its line as the code section writes a line)."""
        return to_json(self)

    def as_written(self) -> "Finding":
        """The finding as its JSON gives it back (of(as_dict())): without the merged parts, its line and prediction
        rounded as written; what the document holds, so that the document made and the document read are one."""
        return replace(self, parts=(), line=self.line.as_written() if self.line else None,
                       prediction=self.prediction.as_written() if self.prediction else None)

    @classmethod
    def of(cls, d: dict) -> "Finding":
        """A finding from its JSON (as_dict): its line a CodeSite, its prediction a Prediction (the merged parts are
        not in the JSON)."""
        return from_json(cls, d)


def severity_of(share: float) -> str:
    """high, medium or low for an impact's share of its window (HIGH_SHARE, MEDIUM_SHARE)."""
    return "high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE else "low"


def make_finding(rule: str, impact_ns, window_ns: int, subject, evidence: str, suggestion: str,
                 severity: str | None = None) -> Finding:
    """A finding whose share of the window and severity follow from its impact (a given severity wins)."""
    impact = int(max(impact_ns, 0))
    share = impact / window_ns if window_ns else 0.0
    return Finding(rule, severity or severity_of(share), impact, round(share, 4), subject, evidence, suggestion)


@dataclass
class Context:
    """What the rules read: the analysis's facts (rules/facts.py), the options they take (the pipeline depth of this
    toolkit's workloads, the shortest idle gap counted) and the program's lines."""
    facts: Facts
    pipeline_depth: int = defaults.PIPELINE_DEPTH
    code: CodeLines | None = None  # the program's lines behind the idle time and copies (sections/code_lines.py)
    min_gap_ns: int = defaults.MIN_GAP_NS  # --min-gap-ms, as the analysis took it: the long gaps' floor
    timeline: Timeline | None = None  # a few steady iterations to replay fixes on (sections/timeline.py)

    @property
    def copies(self) -> pd.DataFrame:
        """The memcpy table (empty when the trace has none)."""
        return self.facts.copy_rows

    @property
    def link_gbps(self) -> float | None:
        """The host link's GB/s; None when it is unknown."""
        return self.facts.link_gbps

    @property
    def program(self) -> Program:
        """What the traced program is: its framework and whether it is this toolkit's workload."""
        return self.facts.program

    @property
    def pytorch(self) -> bool:
        """Whether the traced program is a PyTorch program."""
        return self.program.framework == "pytorch"

    def window_ns(self) -> int:
        """The analysed window's duration (ns); 0 without a window."""
        return self.facts.window_ns

    def gpus(self) -> int:
        """How many GPUs ran work in the window (at least 1)."""
        return max(1, self.facts.gpu.devices if self.facts.gpu else 0)

    def gpu_time_ns(self) -> int:
        """The GPUs' time in the window (window x GPUs): what impacts are shares of, so that the idle time of several
        GPUs never counts for more than all of it."""
        return self.window_ns() * self.gpus()

    def steps(self) -> int:
        """How many steps the trace holds; 0 without steps."""
        return self.facts.steps.count

    def finding(self, rule: str, impact_ns, subject, evidence: str, suggestion: str, severity: str | None = None):
        """A finding with its severity and share of the window derived from its impact."""
        return make_finding(rule, impact_ns, self.gpu_time_ns(), subject, evidence, suggestion, severity)

    def advice(self, pytorch: str, cuda: str, stage: str | None = None, fix: str | None = None) -> str:
        """The fix in the program's terms, and for a PyTorch program the drop-in fix (FIXES) that applies it; this
        toolkit's stage that applies it only for its own traces."""
        text = pytorch if self.pytorch else cuda
        if fix and self.pytorch:
            text = f"{text}; {FIXES[fix]}"
        return f"{text} (see stage {stage})" if stage and self.program.toolkit else text

    def share_of_window(self, ns) -> str:
        """ns as a percentage of the window, in words."""
        win = self.gpu_time_ns()
        if not win:
            return "the whole capture"
        return f"{100 * ns / win:.0f}% of the window" if self.gpus() == 1 else \
            f"{100 * ns / win:.0f}% of the {self.gpus()} GPUs' time in the window"

    def per_step(self, ns) -> str:
        """', X ms per step' for ns spread over the steps; empty without steps."""
        n = self.steps()
        return f", {ms(ns / n)} per step" if n else ""

    def link_pct(self, gbps: float) -> str:
        """' (N% of the X GB/s link)' for gbps; empty when the link speed is unknown."""
        link = self.link_gbps
        return f" ({100 * gbps / link:.0f}% of the {link:.0f} GB/s link)" if link else ""


CtxT = TypeVar("CtxT")  # what a family's rules read: Context (diagnosis), RankContext (ranks), ScalingContext (scaling)


class Rule(Generic[CtxT]):
    """One rule, a class per rule: `id` the stable `rule` of its findings (docs/json-schema.md lists every id, and
    tests/test_rule_registry.py holds the two to each other); `first` whether its findings are notes on whether the
    capture can be trusted at all, which diagnosis.diagnose lists first and never drops as noise; `exclusive` whether,
    when it fires, it excludes every rule listed after it (fired() stops there: the multi-GPU and scaling rules each
    give one verdict); check(ctx) its findings, empty when it does not fire. A family's registry (diagnosis.RULES,
    ranks.RANK_RULES, scaling.SCALING_RULES) lists one instance of each, in the order fired() applies them.
    `fires_when` and `suggests` are its row of the docs' table (rules/rule_table.py makes the table from them):
    markdown, where {rule.NAME} stands for the rule's own attribute (its threshold), so that a threshold is written
    once."""
    id: str
    first: bool = False
    exclusive: bool = False
    fires_when: str = ""
    suggests: str = ""

    def check(self, ctx: CtxT) -> list[Finding]:
        """This rule's findings; empty when it does not fire."""
        raise NotImplementedError

    def fix(self, finding: Finding, ctx: CtxT) -> Fix | NoFigure:
        """What the advised fix changes in the replayed timeline (analysis/replay/fixes.py), or why the trace cannot
        say what it buys (rules/prediction.py replays it)."""
        return NoFigure("this finding's fix is not one the replay can make")

    def excludes_rest(self, found: list[Finding]) -> bool:
        """Whether these findings of the rule exclude every rule after it (an exclusive rule's always do)."""
        return self.exclusive


def fired(rules: Sequence[Rule[CtxT]], ctx: CtxT) -> Iterator[tuple[Rule[CtxT], Finding]]:
    """(rule, finding) for each finding of the rules in their order, up to and including the first exclusive rule
    that fires: every rule's findings where none is exclusive, the first that fires where all are."""
    for rule in rules:
        found = rule.check(ctx)
        for f in found:
            yield rule, f
        if found and rule.excludes_rest(found):
            return


def ms(ns) -> str:
    """Nanoseconds as milliseconds: 1,234.5 ms."""
    return f"{ns / 1e6:,.1f} ms"


def us(ns) -> str:
    """Nanoseconds as microseconds: 12.3 us."""
    return f"{ns / 1e3:,.1f} us"


def gb(b) -> str:
    """Bytes as GB: 1.41 GB."""
    return f"{b / 1e9:.2f} GB"


def size(b) -> str:
    """Bytes in the unit that reads best: 64 KB, 1.0 MB, 2.15 GB."""
    return f"{b / 1e9:.2f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB" if b >= 1e6 else f"{b / 1e3:.0f} KB"


def left_out(ctx: Context, kind: str, considered: pd.DataFrame) -> str:
    """What a copy rule leaves out of the summary's count of this direction: the small copies (scalar reads), so
    that the two counts never seem to disagree."""
    every = ctx.copies[ctx.copies["copy_kind"] == kind] if len(ctx.copies) else ctx.copies
    rest = len(every) - len(considered)
    if rest <= 0:
        return ""
    small = every[~every.index.isin(considered.index)]
    return f"; {rest:,} smaller {kind} copies ({size(int(small['bytes'].sum()))} in all) are not counted here"


def calls_text(calls: dict, n: int = 3) -> str:
    """The first n calls of {name: ns} as text: "futex 12.0 ms, poll 3.1 ms"."""
    return ", ".join(f"{k} {ms(v)}" for k, v in list(calls.items())[:n])


def idle_of(ctx: Context, cause: IdleCause) -> pd.DataFrame:
    """The idle attribution's rows of one cause; for the per-step causes, those inside the steps where the set-up
    before them is reported apart."""
    steps = ctx.facts.idle_step_rows
    t = steps if cause.per_step and steps is not None else ctx.facts.idle_rows
    return t[t["cause"] == cause.name] if len(t) else t


def idle_by_subject(rows: pd.DataFrame, missing: str = "") -> pd.Series:
    """Idle ns of attribution rows per subject (a missing subject named `missing`), largest first."""
    return rows.groupby(rows["subject"].fillna(missing))["idle_ns"].sum().sort_values(ascending=False)


def idle_figures(ctx: Context) -> Idle:
    """The idle attribution's figures (no devices, no calls without an idle section)."""
    return ctx.facts.idle or Idle()
