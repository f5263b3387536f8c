"""The GPU's idle causes, declared once: each one's name in the JSON (`idle.causes[].cause`), the rule that reports it,
what a chart's legend and the time breakdown call it, its colour, and what it means. The idle attribution
(sections/idle.py) gives each idle nanosecond to one of them, first match in CAUSES' order; the time breakdown
(sections/breakdown.py), the palette (render/palette.py), the rules (rules/base.py, rules/gpu_idle.py,
rules/host_work.py) and the docs' `idle` row (docs/json-schema.md, held to this list by tests/test_extension_points.py)
read them here.

A new cause is one IdleCause registered here (register(), in precedence order): it gets its colour, its labels and,
with an `idle_rule`, its finding (rules/gpu_idle.IdleRule); its attribution is sections/idle.py's, where a cause with
`calls` needs no more than its pattern (the launching threads' OS calls of those names claim the idle time in them)."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class IdleCause:
    """One idle cause. name: its name in the JSON; rule: the id of the rule that reports it; legend: what a chart's
    legend names it by (the rule, and which part of it where one rule reports two causes); label: its part of the
    time breakdown (None: the range it lies in names it, cpu-range); color: #RRGGBB in every chart; doc: what the
    launching thread was doing (what the generic rule's evidence says); fix: the
    generic rule's suggestion (a cause whose rule is written out, rules/gpu_idle.py or host_work.py, gives its own); per_step: a cost of each step, counted inside the steps where the set-up before
    them is reported apart (summary.setup); calls: for a cause added to the attribution by its OS calls alone, the
    call names that claim the idle time in them (the built-in causes' own tests are sections/idle.py's)."""
    name: str
    rule: str
    label: str | None
    color: str
    doc: str
    legend: str = ""
    per_step: bool = False
    fix: str = ""
    calls: re.Pattern | None = None

    @property
    def legend_name(self) -> str:
        """The legend's name: `legend`, else the rule's id."""
        return self.legend or self.rule


SETUP = IdleCause(
    "setup", "setup-in-window", "idle: one-time set-up", "#76B7B2",
    "the launching thread inside a one-time CUDA set-up call (the context, module loading, a first launch that loads "
    "its module, cudaMalloc/cudaFree of the caching allocator, stream creation)")
COMM_WAIT = IdleCause(
    "comm-wait", "comm-wait", "idle: communication", "#264653",
    "the launching thread inside an MPI call that nsys traced, or a range named after one or after a collective")
MAPPING = IdleCause(
    "mapping", "memory-mapping-in-gaps", "idle: memory mapping", "#59405C",
    "a thread of the launching process in mmap/munmap/fallocate...", per_step=True)
SLEEP = IdleCause(
    "sleep", "host-sleep", "idle: sleeping", "#C5B0D5",
    "the launching thread in nanosleep/clock_nanosleep/usleep (Python's time.sleep), or switched out by the "
    "scheduler outside any CUDA call")
DRAIN = IdleCause(
    "drain", "output-bound", "idle: output drain", "#BCBD22",
    "the launching thread blocked waiting, as for `input`, after its last step range has ended",
    legend="output-bound (drain)")
INPUT = IdleCause(
    "input", "input-bound", "idle: input-bound", "#2EC4B6",
    "the launching thread blocked in poll/futex/read/sem_wait/pthread_cond_*wait..., outside CUDA calls")
CPU_RANGE = IdleCause(
    "cpu-range", "gpu-idle-cpu-bound", None, "#9C755F",
    "a gap >= `--min-gap-ms` inside the deepest user NVTX range", legend="gpu-idle-cpu-bound, in a range")
HOST_SYNC = IdleCause(
    "host-sync", "host-sync", "idle: host-sync", "#F28E2B",
    "a gap that follows a synchronising call (a short one whole, a long one's first turnaround)", per_step=True)
LAUNCH = IdleCause(
    "launch", "launch-bound", "idle: launches", "#EDC948",
    "gaps shorter than `--min-gap-ms` between GPU operations", per_step=True)
CPU = IdleCause(
    "cpu", "gpu-idle-cpu-bound", "idle: CPU work, no range", "#BAB0AC",
    "long gaps, the launching thread busy outside ranges", legend="gpu-idle-cpu-bound, no range")

CAUSES: list[IdleCause] = [SETUP, COMM_WAIT, MAPPING, SLEEP, DRAIN, INPUT, CPU_RANGE, HOST_SYNC, LAUNCH, CPU]


def register(cause: IdleCause, before: IdleCause | None = None) -> IdleCause:
    """Add a cause, ahead of `before` in the order of precedence (last without one); a name given twice is an error."""
    if any(c.name == cause.name for c in CAUSES):
        raise ValueError(f"idle cause {cause.name!r} is declared already")
    CAUSES.insert(CAUSES.index(before) if before else len(CAUSES), cause)
    return cause


def unregister(name: str) -> None:
    """Remove the cause of that name (tests' toy causes)."""
    CAUSES[:] = [c for c in CAUSES if c.name != name]


def by_name(name: str) -> IdleCause | None:
    """The cause of that name; None for a name no cause has."""
    return next((c for c in CAUSES if c.name == name), None)


def names() -> tuple[str, ...]:
    """Every cause's name, in the order of precedence."""
    return tuple(c.name for c in CAUSES)


def added() -> list[IdleCause]:
    """The causes attributed by their OS calls alone (`calls`), in the order of precedence."""
    return [c for c in CAUSES if c.calls is not None]


def added_calls() -> list[tuple[str, re.Pattern]]:
    """(name, the OS calls' pattern) of each of the added() causes."""
    return [(c.name, c.calls) for c in CAUSES if c.calls is not None]
