"""The launching threads' NVTX ranges as the idle attribution (sections/idle.py) reads them: which of them mark the
program's phases (not steps, not PyTorch operators), how they nest, and the idle time each family of names holds as
the deepest range open at each instant, so the parts of the time line add up to the whole."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..common.interval_sets import Union
from ..common.intervals import Coverage
from .program import family, is_operator_range, matching, per_name


RANGE_COLUMNS = ["global_tid", "start_ns", "end_ns", "name"]  # what the attribution reads of a range


def thread_ranges(nvtx: pd.DataFrame, threads) -> tuple[pd.DataFrame, np.ndarray]:
    """The threads' NVTX ranges (RANGE_COLUMNS alone: a long capture has millions) and which are PyTorch operators'."""
    d = nvtx.loc[nvtx["global_tid"].isin(list(threads)).to_numpy(), RANGE_COLUMNS] if len(nvtx) else nvtx
    return d, per_name(d["name"], is_operator_range).to_numpy(bool) if len(d) else np.zeros(0, bool)


def phases(d: pd.DataFrame, operator: np.ndarray, step_regex: str | None) -> pd.DataFrame:
    """The ranges of thread_ranges() that mark phases of the program: not steps, not PyTorch operators."""
    if d.empty:
        return d
    keep = ~operator
    if step_regex:
        keep &= ~matching(d["name"], step_regex)
    return d[keep]


@dataclass(frozen=True)
class Nesting:
    """Ranges in (thread, start, longest first) order with each one's parent among them (-1: none) and family name:
    worked out once over all ranges, so that the time of any part of the time line adds up to that of the whole."""
    s: np.ndarray
    e: np.ndarray
    parent: np.ndarray
    family: np.ndarray

    @classmethod
    def of(cls, ranges: pd.DataFrame) -> "Nesting":
        """The nesting of these NVTX ranges (global_tid, start_ns, end_ns, name), thread by thread."""
        r = ranges.sort_values(["global_tid", "start_ns", "end_ns"], ascending=[True, True, False])
        s, e, tid = r["start_ns"].to_numpy(), r["end_ns"].to_numpy(), r["global_tid"].to_numpy()
        parent = np.full(len(r), -1, dtype=np.int64)
        stack: list[int] = []
        for i in range(len(r)):  # nesting among these ranges only: each range's time is taken from its parent's
            while stack and (tid[stack[-1]] != tid[i] or e[stack[-1]] <= s[i]):
                stack.pop()
            if stack and e[i] <= e[stack[-1]]:
                parent[i] = stack[-1]
            stack.append(i)
        return cls(s, e, parent, per_name(r["name"], family).to_numpy())


def family_time(u: Union, nest: Nesting, lo, hi) -> pd.Series:
    """Time of `u` (inside [lo, hi)) given to the deepest range open at each instant, summed per family of names
    (counters as N), unranked: the parts of the time line add up."""
    if nest.s.size == 0 or u[0].size == 0:
        return pd.Series(dtype="int64")
    # only ranges overlapping [lo, hi) hold time there, and a range's parent overlaps wherever it does
    near = np.flatnonzero((nest.s < hi) & (nest.e > lo))
    within = Coverage(*u).within(nest.s[near], nest.e[near])
    own = np.zeros(nest.s.size, dtype=np.int64)
    own[near] = within
    has = nest.parent[near] >= 0
    np.subtract.at(own, nest.parent[near][has], within[has])
    return pd.Series(own[near], index=nest.family[near]).groupby(level=0).sum()


def ranked_times(own: pd.Series) -> pd.Series:
    """Per-name times with some time, the longest first."""
    return own[own > 0].sort_values(ascending=False)


def range_edges(mine: pd.DataFrame, operator: np.ndarray) -> np.ndarray:
    """Starts and ends of the threads' non-operator ranges (mine: thread_ranges()), sorted: where the thread moves to
    other work."""
    d = mine[~operator] if len(mine) else mine
    return np.sort(np.concatenate((d["start_ns"].to_numpy(), d["end_ns"].to_numpy())))


def steps_end(mine: pd.DataFrame, step_regex: str | None) -> int | None:
    """Where the last step range of the threads (mine: thread_ranges()) ends; None without steps."""
    if not step_regex or mine.empty:
        return None
    steps = mine[matching(mine["name"], step_regex)]
    return int(steps["end_ns"].max()) if len(steps) else None
