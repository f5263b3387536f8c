"""The program's steady state: where the verdict is taken from.

A capture of a fast program is mostly set-up (model load, compilation, cuDNN autotuning) and its first steps. The
steady state starts at the first step that is not warm-up:

    steps      [set-up ....][step 0 ......][s1][s2][s3][s4][s5]
    steady                                 ^ first step after the warm-up outliers (> WARMUP_RATIO x the median)

Without step ranges the steps are found in the kernel stream itself: the sequence of kernel names repeats with a
period (the kernels of one iteration); the steady state starts where that repetition starts, again past the
iterations that are warm-up outliers by time.

A range the program named after its warm-up (`warmup`, `warm-up`, `Warmup steps`: a benchmark's own mark, in either
profiler) is set-up whatever its steps look like: the steady state starts after the last one ends (at the first step
after it, where there are steps), so its CUDA set-up (context, module loading, first allocations) never reads as
the loop's CPU work.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import re

import numpy as np
import pandas as pd

WARMUP_RATIO = 1.5       # a first step this many times the median step is warm-up
MIN_STEPS = 3            # steps needed to tell warm-up from the steady state
MATCH = 0.9              # share of a kernel-name period that must repeat for it to be the loop's
MIN_ITERATIONS = 4       # inferred iterations the steady part must hold
SEQUENCE_LIMIT = 2_000_000  # kernels read for the period: the set-up is at the start of a long capture
MIN_SHARE = 0.01         # a set-up below this share of the capture is left in (nothing to gain, a window to explain)
WARMUP_RANGE = re.compile(r"\bwarm[-_ ]?up", re.I)  # a range the program named after its warm-up


@dataclass(frozen=True)
class Steady:
    """Where the steady state starts (trace ns), from what (`steps` or `kernel stream`), how many steps or inferred
    iterations are warm-up, and the median step (ns) the warm-up was judged against."""
    start_ns: int
    source: str
    warmup: int
    steps: int
    median_ns: float
    warmup_ns: list[int]
    period: int | None = None  # kernels per inferred iteration
    flushed: bool = False      # moved past the program's one early wait for its output pipeline (past_flush)
    first_ns: int | None = None  # the first step's (or repeating iteration's) start, warm-up included: the loop's


def warmup_count(durations: np.ndarray) -> int:
    """How many steps at the start are warm-up: each, from the first on, longer than WARMUP_RATIO x the median step
    (at most half of the steps; none with fewer than MIN_STEPS)."""
    n = durations.size
    if n < MIN_STEPS:
        return 0
    limit = WARMUP_RATIO * float(np.median(durations))
    k = 0
    while k < n // 2 and durations[k] > limit:
        k += 1
    return k


def from_steps(steps: pd.DataFrame) -> Steady | None:
    """The steady state of step ranges (start_ns, end_ns in start order): from the first step after the warm-up."""
    if steps.empty:
        return None
    d = (steps["end_ns"] - steps["start_ns"]).to_numpy(np.int64)
    k = warmup_count(d)
    return Steady(int(steps["start_ns"].iloc[k]), "steps", k, len(steps), float(np.median(d)),
                  [int(x) for x in d[:k]], first_ns=int(steps["start_ns"].iloc[0]))


def period(ids: np.ndarray) -> int | None:
    """The number of kernels in one iteration of the loop: the shortest shift under which the kernel names of the
    sequence's second half repeat (at least MATCH of them); None where nothing repeats so."""
    tail = ids[ids.size // 2:]
    if tail.size < 2 * MIN_ITERATIONS:
        return None
    order = np.argsort(tail, kind="stable")
    same = tail[order[1:]] == tail[order[:-1]]
    gaps = (order[1:] - order[:-1])[same]  # index distance between a name's successive runs
    if gaps.size == 0:
        return None
    values, counts = np.unique(gaps, return_counts=True)
    # the commonest distances, and those of the names that occur least often (once an iteration: a model's repeated
    # blocks make shorter distances commoner than the period itself)
    names, per_name = np.unique(tail, return_counts=True)
    rare = np.isin(tail[order[1:]][same], names[(per_name >= 2) & (per_name <= np.percentile(per_name, 10))])
    rare_values, rare_counts = np.unique(gaps[rare], return_counts=True) if rare.any() else (values[:0], counts[:0])
    shifts = sorted({int(v) for v in (*values[np.argsort(-counts, kind="stable")][:12],
                                      *rare_values[np.argsort(-rare_counts, kind="stable")][:4])
                     if v * MIN_ITERATIONS <= tail.size})
    rates = {s: float(np.mean(tail[:-s] == tail[s:])) for s in shifts}
    good = [s for s, r in rates.items() if r >= MATCH]
    if not good:
        return None
    best = max(rates[s] for s in good)
    return min(s for s in good if rates[s] >= best - 0.02)  # a multiple of the period repeats as well


def from_kernels(starts: np.ndarray, ids: np.ndarray) -> Steady | None:
    """The steady state of a kernel stream (starts and name ids in start order): where its names begin to repeat
    with the loop's period, past the inferred iterations that are warm-up outliers by time."""
    p = period(ids) if ids.size else None
    if p is None:
        return None
    differs = ids[:-p] != ids[p:]
    # from the end back, whole periods that repeat the next one; the first that does not ends the search
    n_blocks = differs.size // p
    blocks = differs[differs.size - n_blocks * p:].reshape(n_blocks, p).mean(axis=1)
    bad = np.flatnonzero(blocks > 1 - MATCH)
    first_block = int(bad[-1]) + 1 if bad.size else 0
    first = differs.size - n_blocks * p + first_block * p
    begins = starts[first::p]
    if begins.size < MIN_ITERATIONS:
        return None
    d = np.diff(begins)
    k = warmup_count(d)
    return Steady(int(begins[k]), "kernel stream", k, int(d.size), float(np.median(d)), [int(x) for x in d[:k]], p,
                  first_ns=int(begins[0]))


def past_flush(found: Steady, begins: np.ndarray, drain_ends: np.ndarray) -> Steady:
    """A program that waits for its output pipeline once before its last step (a flush at the end of its warm-up, as
    benchmarks do before they start the clock) draws the warm-up's end itself: the steady state then starts at the
    first step (or iteration) after that drain. Several such waits are the program's own rhythm, and stay in."""
    inside = drain_ends[(drain_ends > found.start_ns) & (drain_ends < begins[-1])] if begins.size else drain_ends[:0]
    if inside.size != 1:
        return found
    k = int(np.searchsorted(begins, inside[0]))
    if begins.size - k < MIN_STEPS:
        return found
    base = int(np.searchsorted(begins, found.start_ns))  # where the steady state started among the begins
    return replace(found, start_ns=int(begins[k]), warmup=found.warmup + k - base, flushed=True)


def past_warmup_range(found: Steady | None, steps: pd.DataFrame, warmup_end: int) -> Steady:
    """The steady state past the program's own warm-up range (ending at warmup_end): from the first step after it,
    or from its end where no step follows (no steps, or none after it)."""
    if len(steps):
        begins = steps["start_ns"].to_numpy(np.int64)
        k = int(np.searchsorted(begins, warmup_end))
        if k < begins.size:
            d = (steps["end_ns"] - steps["start_ns"]).to_numpy(np.int64)
            return Steady(int(begins[k]), "steps", k, len(steps), float(np.median(d[k:])), [int(x) for x in d[:k]],
                          first_ns=int(begins[0]))
    return Steady(int(warmup_end), "warm-up range", 0, 0, 0.0, [], first_ns=found.first_ns if found else None)


def warmup_end(ranges: pd.DataFrame) -> int | None:
    """Where the last range named after a warm-up (WARMUP_RANGE) ends; None without one."""
    if ranges is None or ranges.empty:
        return None
    names = pd.Series(pd.Categorical(ranges["name"].astype(str)).categories)
    named = set(names[names.str.contains(WARMUP_RANGE)])
    if not named:
        return None
    return int(ranges.loc[ranges["name"].isin(named), "end_ns"].max())


def choose(steps: pd.DataFrame, kernel_sequence, capture: tuple[int, int] | None,
           drain_ends: np.ndarray | None = None, warmup_ends: int | None = None) -> Steady | None:
    """The steady state: from the steps where there are any (kernel_sequence is then not called), else from the
    kernel stream (kernel_sequence() -> (starts, name ids)), past an early flush of the output pipeline (drain_ends:
    where its drains ended) and past the program's own warm-up range (warmup_ends: where the last one ended); None
    where it starts within MIN_SHARE of the capture's start (capture: first to last GPU operation), or nothing
    repeats."""
    if capture is None:
        return None
    if len(steps):
        found, begins = from_steps(steps), steps["start_ns"].to_numpy(np.int64)
    else:
        starts, ids = kernel_sequence()
        found = from_kernels(starts, ids)
        begins = starts[found.start_ns <= starts][::found.period] if found else None
    if found is not None and drain_ends is not None and len(drain_ends):
        found = past_flush(found, begins, np.sort(np.asarray(drain_ends, np.int64)))
    if warmup_ends is not None and warmup_ends < capture[1] and (found is None or found.start_ns < warmup_ends):
        found = past_warmup_range(found, steps, warmup_ends)
    if found is None or found.start_ns - capture[0] < MIN_SHARE * (capture[1] - capture[0]) or \
            found.start_ns >= capture[1]:
        return None
    return found
