"""Diagnosis rules: each reads the computed analysis and, when it fires, says what it costs and the next fix.

The findings contract (docs/json-schema.md): every finding has `rule` (a stable id), `severity`, `impact_ns` (the time
it costs: GPU idle time it explains, host time blocked, or copy time a fix would save), `impact_fraction` (impact over
the GPUs' time in the analysis window: the window times the GPUs that ran work in it, so never above 1), `subject` (the NVTX range, API call or copy direction it is about; None if none), `evidence`
(numbers from this trace) and `suggestion` (the fix, in the program's own terms). Severity follows from the impact:
high >= 10% of the window, medium >= 2%, low below; `info` only for notes on the capture that cost no time. The list
is ordered by impact, largest first, after the notes that say the trace itself cannot be trusted.

Idle time is attributed once (analysis/sections/idle.py), so the idle rules never count the same nanosecond twice; the copy
rules count copy time, which is GPU time spent copying, not idle time.
"""

from __future__ import annotations

from collections.abc import Sequence

from .capture import (FailedRun, IncompleteTrace, NvtxMissing, ShortCapture, TooLittleToJudge,
                      WarmupInCapture)
from .gpu_idle import (CommWait, GpuBound, HostSleep, HostSync, InputBound, MemoryMappingInGaps,
                                                  SetupInWindow, generic_rules)
from .host_work import GpuIdleCpuBound, LaunchBound
from .output import OutputBound
from .copy import NoCopyComputeOverlap, PageableMemcpy, SyncMemcpy, UnifiedMemory
from .cpu_lines import CpuHotspot
from . import code_advice, prediction
from .base import NOISE_SHARE, Context, Finding, Rule, fired
from .prediction import Loop, Overall
from .role_fixes import role_fix
from ..replay.fixes import Fix, NoFigure
from ..sections import roles


# every finding of one trace: a new rule is a class on base.Rule in its family's file, listed here; its row of the
# docs' table (docs/json-schema.md) is made from its fires_when and suggests (`python tools/rule_tables.py`;
# tests/test_rule_registry.py holds the two together); an idle cause declared without a rule of its own
# (common/idle_causes.py) gets the generic one, after these (rules())
RULES: list[Rule[Context]] = [
    FailedRun(), IncompleteTrace(), TooLittleToJudge(), InputBound(), OutputBound(), CommWait(), HostSleep(), GpuIdleCpuBound(), MemoryMappingInGaps(),
    HostSync(), LaunchBound(), SetupInWindow(), UnifiedMemory(), PageableMemcpy(), SyncMemcpy(), NoCopyComputeOverlap(), GpuBound(),
    CpuHotspot(), WarmupInCapture(), ShortCapture(), NvtxMissing()]


def rules() -> list[Rule[Context]]:
    """The rules diagnose() applies, in order: RULES, then the generic rule of each idle cause that has none there."""
    return [*RULES, *generic_rules({rule.id for rule in RULES})]


def diagnose(ctx: Context) -> tuple[tuple[Finding, ...], Overall]:
    """Every rule's findings: capture-trust notes first, then by what their fixes buy (rules/prediction.py: the
    replayed gain; a finding whose gain the trace cannot say by what its idle share would buy), largest first, the
    low and info ones after by impact. A finding that costs less than NOISE_SHARE of the window is dropped: nobody
    fixes 0.0 ms. Also what fixing them all buys, and why the order differs from the idle share's, where it does."""
    floor = NOISE_SHARE * ctx.gpu_time_ns()
    fired_ = list(fired(rules(), ctx))
    first = {id(f) for rule, f in fired_ if rule.first}
    lined = code_advice.attach([f for _, f in fired_], ctx.code, ctx.gpu_time_ns())
    found = [(id(f) in first, f) for f in lined if f.severity == "info" or id(f) in first or f.impact_ns >= floor]
    found.sort(key=lambda pf: (not pf[0], pf[1].severity == "info", -pf[1].impact_ns))
    by_share = [f for _, f in found]
    by_id = {r.id: r for r in rules()}
    complete = ctx.facts.integrity.verdict in (None, "complete")
    loop = Loop(ctx.facts.warmup.count, ctx.facts.warmup.ns, ctx.facts.window_ns,
                part_of_run=ctx.facts.profiler == "torch.profiler")
    overall = prediction.attach(by_share, lambda f: fix_parts(f, by_id, ctx), ctx.timeline, complete, loop)
    group = {"high": 0, "medium": 0, "low": 1}  # the low findings after, the info notes last
    ranked = sorted(found, key=lambda pf: (not pf[0], group.get(pf[1].severity, 2),
                                           -_gain(pf[1]) if group.get(pf[1].severity) == 0 else 0, -pf[1].impact_ns))
    by_gain = [f for _, f in ranked]
    note = prediction.rank_note(_costed(by_share), _costed(by_gain))
    return tuple(f.as_written() for f in by_gain), Overall(overall.all_fixed, note).as_written()


def _gain(f: Finding) -> float:
    """What a finding's fix buys, for the ranking: its predicted gain; where the trace cannot say, what its idle share
    would buy if it holds most of the time (the GPU's own work, other ranks' waits), else nothing known (after the
    findings whose fixes the replay says pay)."""
    return rank_gain(f.prediction, f.impact_fraction)


DOMINANT = 0.5  # a finding without figures that holds this share of the time ranks by what its share would buy


def rank_gain(p, impact_fraction: float) -> float:
    """The ranking's figure for a finding's prediction (or None) and idle share (_gain)."""
    if p is not None and p.said:
        return p.gain
    return 1 / max(1 - min(impact_fraction, 0.99), 0.01) if impact_fraction >= DOMINANT else 1.0


def _costed(findings: list[Finding]) -> list[Finding]:
    """The findings a ranking compares: the high and medium ones, not the capture-trust notes."""
    return [f for f in findings if f.severity in ("high", "medium") and f.rule not in TRUST_NOTES]


# the rules whose findings a line's role fixes (rules/role_fixes.py): the CPU work, the syncs and the launches a line
# makes; the others (copies, waits) keep their rule's fix, but a copy of a module's weights is the weights' role's
ROLE_RULES = ("gpu-idle-cpu-bound", "host-sync", "launch-bound")


def fix_parts(f: Finding, by_id: dict, ctx: Context) -> list[tuple[str, Fix | NoFigure]]:
    """What a finding's advice changes in the replay, part by part (named): for it and each finding merged into it
    (one job: the output's copy and its post-processing), its line's role's fix where the role fixes its rule, else
    its rule's fix; one fix a role's line and one a rule's subject."""
    out, seen = [], set()
    for g in (f, *f.parts):
        fx = role_fix(g, ctx) if g.line is not None and (g.rule in ROLE_RULES or g.line.role == roles.WEIGHTS) \
            else None
        key = ("role", g.line.role, g.line.place) if fx is not None else ("rule", g.rule, g.subject)
        if key in seen:
            continue
        seen.add(key)
        if fx is not None:
            out.append((f"{g.line.role} work at {g.line.place}", fx))
        else:
            rule = by_id.get(g.rule)
            out.append((prediction.name_of(g), rule.fix(g, ctx) if rule is not None else NoFigure("no rule replays it")))
    return out


def fix_of(f: Finding, by_id: dict, ctx: Context) -> Fix | NoFigure:
    """A finding's whole fix: its parts' (fix_parts) made together."""
    return prediction.together([x for _, x in fix_parts(f, by_id, ctx)])


TRUST_NOTES = ("failed-run", "incomplete-trace")  # notes that lead the verdict although they cost no time


def verdict_of(findings: Sequence[Finding]) -> Finding | None:
    """The finding a trace's verdict names: the first that costs something (or a trust note), in the diagnosis's
    order; None where none does. The text's verdict line and the cycles' merge (analysis/cycles.py) both read it."""
    return next((f for f in findings if names_verdict(f.severity, f.rule)), None)


def names_verdict(severity: str, rule: str) -> bool:
    """Whether a finding may name the verdict: it costs something, or it is a trust note."""
    return severity != "info" or rule in TRUST_NOTES

