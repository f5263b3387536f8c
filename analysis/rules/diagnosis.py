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

from nsys_transfer.analysis.rules.capture import FailedRun, IncompleteTrace, NvtxMissing, ShortCapture, WarmupInCapture
from nsys_transfer.analysis.rules.gpu_idle import (CommWait, GpuBound, GpuIdleCpuBound, HostSleep, HostSync, InputBound,
                                                  LaunchBound, MemoryMappingInGaps, generic_rules)
from nsys_transfer.analysis.rules.output import OutputBound
from nsys_transfer.analysis.rules.copy import NoCopyComputeOverlap, PageableMemcpy, SyncMemcpy, UnifiedMemory
from nsys_transfer.analysis.rules.cpu_lines import CpuHotspot
from nsys_transfer.analysis.rules import code_advice
from nsys_transfer.analysis.rules.base import NOISE_SHARE, Context, Rule, fired


# every finding of one trace: a new rule is a class on base.Rule in its family's file, listed here; its row of the
# docs' table (docs/json-schema.md) is made from its fires_when and suggests (`python tools/rule_tables.py`;
# tests/test_rule_registry.py holds the two together); an idle cause declared without a rule of its own
# (common/idle_causes.py) gets the generic one, after these (rules())
RULES: list[Rule[Context]] = [
    FailedRun(), IncompleteTrace(), InputBound(), OutputBound(), CommWait(), HostSleep(), GpuIdleCpuBound(), MemoryMappingInGaps(),
    HostSync(), LaunchBound(), UnifiedMemory(), PageableMemcpy(), SyncMemcpy(), NoCopyComputeOverlap(), GpuBound(),
    CpuHotspot(), WarmupInCapture(), ShortCapture(), NvtxMissing()]


def rules() -> list[Rule[Context]]:
    """The rules diagnose() applies, in order: RULES, then the generic rule of each idle cause that has none there."""
    return [*RULES, *generic_rules({rule.id for rule in RULES})]


def diagnose(ctx: Context) -> list[dict]:
    """Every rule's findings: capture-trust notes first, then by impact, largest first. A finding that costs less than
    NOISE_SHARE of the window is dropped: nobody fixes 0.0 ms."""
    floor = NOISE_SHARE * ctx.gpu_time_ns()
    fired_ = list(fired(rules(), ctx))
    first = {id(f) for rule, f in fired_ if rule.first}
    lined = code_advice.attach([f for _, f in fired_], ctx.code, ctx.gpu_time_ns())
    found = [(id(f) in first, f) for f in lined if f.severity == "info" or id(f) in first or f.impact_ns >= floor]
    found.sort(key=lambda pf: (not pf[0], pf[1].severity == "info", -pf[1].impact_ns))
    return [f.as_dict() for _, f in found]
