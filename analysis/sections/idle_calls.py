"""The OS runtime calls the idle attribution reads by name (sections/idle.py): those whose name matches a cause's
pattern, and the idle time inside the calls of each name."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..common.interval_sets import Union
from ..common.intervals import Coverage, union


def calls_matching(osrt: pd.DataFrame, pattern: re.Pattern) -> tuple[Union, pd.DataFrame]:
    """The calls whose name matches the pattern, and their union."""
    names = osrt["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):  # on the categories' codes: no string per row
        rows = osrt[_matching(names.cat.categories, pattern)[names.cat.codes.to_numpy()]]
    else:
        cats = pd.Series(pd.Categorical(names).categories.astype(str))
        wanted = set(cats[cats.str.match(pattern)])
        rows = osrt[names.isin(wanted)] if wanted else osrt.iloc[0:0]
    return union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy()), rows


_MATCHING: dict[tuple[int, str], tuple[pd.Index, np.ndarray]] = {}


def _matching(categories: pd.Index, pattern: re.Pattern) -> np.ndarray:
    """Whether each category matches, and False last (the code -1 of a missing name lands there): made once per
    categories and pattern, since every segment's rows share their frame's categories (gap_causes makes hundreds)."""
    key = (id(categories), pattern.pattern)
    held = _MATCHING.get(key)
    if held is None or held[0] is not categories:
        if len(_MATCHING) > 256:
            _MATCHING.clear()
        hit = pd.Series(categories.astype(str)).str.match(pattern).to_numpy(bool)
        held = _MATCHING[key] = (categories, np.append(hit, False))
    return held[1]


def time_by_name(u: Union, rows: pd.DataFrame) -> pd.Series:
    """Time of `u` inside the calls of each name, by name (calls of one thread do not overlap)."""
    if rows.empty or u[0].size == 0:
        return pd.Series(dtype="int64")
    inside = Coverage(*u).within(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
    return pd.Series(inside, index=rows["name"].astype(str).to_numpy()).groupby(level=0).sum()


def named_times(t: pd.Series) -> dict[str, int]:
    """Per-name times, longest first, without the empty ones."""
    return {str(k): int(v) for k, v in t.sort_values(ascending=False).items() if v > 0}
