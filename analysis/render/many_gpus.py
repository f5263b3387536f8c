"""Many GPUs at a glance, computed when shown (the JSON keeps every GPU's row): the spread of their figures and the
slowest of them (the text report past SUMMARISE_OVER GPUs), and the rank x time grid of the heat map, its rows in
the hosts' order."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..rank_summary import BUSY_COLUMNS, Ranks
from ..sections.gpu_rows import RankGpu


SUMMARISE_OVER = 8      # GPUs: from more than this many, the text report gives the spread instead of every row
STRAGGLER_BELOW = 0.10  # a GPU this far below the median steps/s is a straggler
SLOWEST = 3             # the slowest GPUs always named


@dataclass(frozen=True)
class Quantiles:
    """One figure over the GPUs: median, min, p10, p90 and max."""
    median: float
    min: float
    p10: float
    p90: float
    max: float

    def row(self) -> tuple[float, float, float, float, float]:
        """The quantiles in the text's column order: median, min, p10, p90, max."""
        return self.median, self.min, self.p10, self.p90, self.max


@dataclass(frozen=True)
class Slow:
    """One of the slowest GPUs by steps/s: its shortfall from the median (below), and whether it is a straggler."""
    gpu: str
    steps_per_s: float
    below: float
    straggler: bool


@dataclass(frozen=True)
class Spread:
    """The spread of the GPUs' figures (None where no GPU has the figure) and the slowest GPUs, slowest first."""
    steps_per_s: Quantiles | None
    utilization: Quantiles | None
    dtoh_gbps: Quantiles | None
    idle: Quantiles | None
    slowest: tuple[Slow, ...]


def spread(gpus: Sequence[RankGpu]) -> Spread:
    """The per-GPU figures of the `gpus[]` rows as median, min, p10, p90 and max: steps/s, busy (utilization),
    DtoH GB/s, idle (idle_gap_ns over the GPU's window); and the slowest GPUs by steps/s: the SLOWEST lowest and every
    one more than STRAGGLER_BELOW below the median, slowest first, each with its shortfall from the median."""
    q = lambda values: _quantiles([v for v in values if v is not None and v == v])  # noqa: E731
    rate = q([g.steps_per_s for g in gpus])
    rated = sorted((g for g in gpus if g.steps_per_s), key=lambda g: g.steps_per_s)
    median = rate.median if rate else None
    slow = []
    for i, g in enumerate(rated):
        below = 1 - g.steps_per_s / median if median else 0.0
        if i < SLOWEST or below > STRAGGLER_BELOW:
            slow.append(Slow(g.gpu, g.steps_per_s, below, below > STRAGGLER_BELOW))
    return Spread(rate, q([g.utilization for g in gpus]), q([g.dtoh_gbps for g in gpus]),
                  q([g.idle_gap_ns / g.window_ns if g.window_ns else None for g in gpus]), tuple(slow))


def _quantiles(values: list[float]) -> Quantiles | None:
    if not values:
        return None
    v = np.asarray(values, dtype=float)
    q = np.percentile(v, [0, 10, 50, 90, 100])
    return Quantiles(float(q[2]), float(q[0]), float(q[1]), float(q[3]), float(q[4]))


@dataclass
class RankGrid:
    """Each GPU's busy share and DtoH rate per column of time on the common clock: the numbers of the rank x time
    heat map. gpus: the rows, in natural order of their names (rank2 before rank10). edges_ns: the columns' edges
    (common clock). busy: the share of each column's time within the GPU's own window (its steps) that the GPU was
    busy, NaN outside that window. dtoh_gbps: DtoH into host memory (its data-carrying copies), GB/s. hosts: with
    GPUs on several hosts, the rows ordered by host (host_order) and then by name, and each host's rows as
    (host, first row, end row) (host_rows); empty with one host."""
    gpus: list[str]
    edges_ns: np.ndarray
    busy: np.ndarray
    dtoh_gbps: np.ndarray
    hosts: list[tuple[str | None, int, int]] = field(default_factory=list)


def time_grid(ranks: Ranks, columns: int = 600) -> RankGrid:
    """Ranks' per-bin busy time (tables['busy']) and host-side DtoH (host) on at most about `columns` columns of a
    whole number of host bins; a column between two bins takes a share of each as their time in it."""
    part = ranks.part
    lo, hi = part.window.start_ns, part.window.end_ns
    base = int(part.host_dtoh.bin_ns)
    width = base * max(1, -(-(hi - lo) // (base * columns)))
    edges = np.arange(lo, hi + width, width, dtype=np.int64)
    gpus = sorted(ranks.devices["gpu"], key=natural_key)
    several = "host" in ranks.devices.columns  # merge_parts adds it only with several hosts
    if several:
        host_of = dict(zip(ranks.devices["gpu"], ranks.devices["host"]))
        gpus = sorted(gpus, key=lambda g: host_order(host_of[g]))  # stable: by name within each host
    busy = np.full((len(gpus), len(edges) - 1), np.nan)
    dtoh = np.zeros((len(gpus), len(edges) - 1))
    by_busy = dict(tuple(ranks.tables.get("busy", pd.DataFrame(columns=BUSY_COLUMNS)).groupby("gpu")))
    by_host = dict(tuple(ranks.host.groupby("gpu"))) if len(ranks.host) else {}
    for i, g in enumerate(gpus):
        if g in by_busy and len(by_busy[g]):
            b = by_busy[g]
            t, done = _cumulative(b["bin_start_ns"], b["bin_ns"], b["busy_ns"])
            inside = np.diff(np.interp(edges, t, t - t[0]))
            moved = np.diff(np.interp(edges, t, done))
            busy[i] = np.where(inside > 0, moved / np.where(inside > 0, inside, 1), np.nan)
        if g in by_host and len(by_host[g]):
            h = by_host[g]
            t, done = _cumulative(h["bin_start_ns"], h["bin_ns"], h["bytes"])
            dtoh[i] = np.diff(np.interp(edges, t, done)) / width  # bytes per ns: GB/s
    return RankGrid(gpus, edges, busy, dtoh, host_rows([host_of[g] for g in gpus]) if several else [])


def host_order(host: str | None) -> tuple:
    """Sort key of host names: in natural order (node2 before node10), the unnamed host (None) last."""
    return (host is None, natural_key(host or ""))


def host_rows(hosts: list) -> list[tuple[str | None, int, int]]:
    """Each run of equal hosts in a list of the rows' hosts (row order) as (host, first row, end row): the rows
    first..end-1 are that host's, and a row boundary between hosts lies at each block's first row but the first."""
    out = []
    for i, h in enumerate(hosts):
        if out and out[-1][0] == h:
            out[-1] = (h, out[-1][1], i + 1)
        else:
            out.append((h, i, i + 1))
    return out


def _cumulative(starts, lengths, amounts) -> tuple[np.ndarray, np.ndarray]:
    """The bins' edges and the amount up to each (linear within a bin between them)."""
    s = starts.to_numpy(dtype=np.float64)
    t = np.append(s, s[-1] + float(lengths.iloc[-1]))
    return t, np.concatenate(([0.0], np.cumsum(amounts.to_numpy(dtype=np.float64))))


def natural_key(name: str) -> list:
    """Sort key that orders the numbers in names by value: rank2:GPU 0 before rank10:GPU 0."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name))]
