"""Which side of the loop an idle gap sits on, from the copies at its edges: a gap that ends with a large HtoD copy
waited for input being made, one that begins as a large DtoH copy ends waited on the output's handling. The code
section (code_lines.py) gives a line's idle time the role its gaps' sides say."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..common.intervals import Coverage, union
from . import roles

SIDE_BYTES = 64 * 1024  # a copy at a gap's edge this large carries a batch's input or output, not a scalar
EDGE_NS = 2_000_000     # a DtoH copy that ended this close before a gap began it


@dataclass(frozen=True)
class GapSides:
    """Idle gaps (disjoint, in time order) and the copies at their edges: a gap that ends with a large HtoD copy
    waited for input being made; one that begins as a large DtoH copy ends waited on the output's handling."""
    start: np.ndarray
    end: np.ndarray
    before_input: np.ndarray   # bool: the gap's next GPU operation is an HtoD copy of at least SIDE_BYTES
    after_output: np.ndarray   # bool: a DtoH copy of at least SIDE_BYTES ended where the gap begins

    @classmethod
    def of(cls, gaps: pd.DataFrame, copies: pd.DataFrame | None) -> "GapSides":
        """The gaps' edges, from the gap table's next operation and the copies' ends."""
        g = gaps.sort_values("start_ns")
        start, end = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
        none = np.zeros(len(g), bool)
        if copies is None or copies.empty:
            return cls(start, end, none, none)
        big = copies[copies["bytes"].to_numpy() >= SIDE_BYTES]
        htod = big[big["copy_kind"] == "HtoD"]
        before = np.isin(g["next_correlation_id"].to_numpy(), htod["correlation_id"].to_numpy())
        dtoh_ends = np.sort(big.loc[big["copy_kind"] == "DtoH", "end_ns"].to_numpy(np.int64))
        i = np.searchsorted(dtoh_ends, start, side="right") - 1
        after = (i >= 0) & (start - dtoh_ends[np.clip(i, 0, None)] <= EDGE_NS) if dtoh_ends.size else none
        return cls(start, end, before, after)

    def subset(self, keep: np.ndarray) -> "GapSides":
        """The gaps where keep is True."""
        return GapSides(self.start[keep], self.end[keep], self.before_input[keep], self.after_output[keep])

    def role(self, per_gap: np.ndarray) -> str:
        """Input where most of the line's gap time ends in an input copy, output where most follows an output's,
        else host compute."""
        total = float(per_gap.sum())
        if total <= 0:
            return roles.COMPUTE
        into, out_of = float(per_gap[self.before_input].sum()), float(per_gap[self.after_output].sum())
        if into > 0.5 * total and into > out_of:
            return roles.INPUT
        return roles.OUTPUT if out_of > 0.5 * total else roles.COMPUTE

    def covered_ms(self, samples: pd.DataFrame) -> np.ndarray:
        """The ms of each gap that the samples (a line's) cover, in time order."""
        u = union(samples["start_ns"].to_numpy(), samples["end_ns"].to_numpy())
        return Coverage(*u).within(self.start, self.end) / 1e6
