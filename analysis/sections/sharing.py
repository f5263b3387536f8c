"""What several GPUs share on the host: the figures the multi-GPU rules (analysis/rules/ranks.py) read.

contention(): how fast DtoH copies run while another GPU copies, against their solo rate (slowest_kind: the kind
that slows most). shared_capacity(): the host's DtoH capacity for all GPUs at once. With several hosts, hosts.py
applies them to each host's GPUs alone. Pure functions of DataFrames and dicts.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...nsys_core.contracts import gbps
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Contention:
    """One host memory kind's DtoH copies alone and together, and the slowdown."""
    memory: str
    copies: int
    copies_together: int
    gbps_alone: float | None
    gbps_together: float | None
    solo_gbps: float | None
    solo_source: str | None
    slowdown: float | None


def contention(copies: pd.DataFrame, probe: dict | None, link_gbps: float,
               alone_below: float = 0.1, together_above: float = 0.9) -> pd.DataFrame:
    """Per host memory kind: GB/s of copies that ran alone and of copies that ran while another GPU copied, and the
    slowdown against the solo rate (alone copies of this trace, else the probe's solo figure, else the link speed
    for pinned memory). Columns: memory, copies, gbps_alone, gbps_together, solo_gbps, solo_source, slowdown."""
    rows = []
    for memory, d in copies.groupby("host_kind", sort=True):
        frac = d["concurrent_fraction"].to_numpy()
        alone, together = d[frac < alone_below], d[frac >= together_above]
        g_alone, g_together = gbps_of(alone), gbps_of(together)
        probe_solo = _probe_solo(probe, memory)
        if g_alone is not None:
            solo, source = g_alone, "copies alone in this trace"
        elif probe_solo is not None:
            solo, source = probe_solo, "link probe"
        elif memory == "Pinned":
            solo, source = link_gbps, "--link-gbps"
        else:
            solo, source = None, None
        rows.append({"memory": memory, "copies": int(len(d)), "copies_together": int(len(together)),
                     "gbps_alone": g_alone, "gbps_together": g_together, "solo_gbps": solo, "solo_source": source,
                     "slowdown": g_together / solo if g_together is not None and solo else None})
    return pd.DataFrame(rows, columns=["memory", "copies", "copies_together", "gbps_alone", "gbps_together",
                                       "solo_gbps", "solo_source", "slowdown"])


def slowest_kind(cont: pd.DataFrame) -> pd.DataFrame:
    """The contention table's row of the host memory kind whose copies slow down most while another GPU copies (no
    row when none is measured)."""
    return cont.dropna(subset=["slowdown"]).sort_values("slowdown").head(1)


def gbps_of(copies: pd.DataFrame) -> float | None:
    """GB/s of these copies over their summed durations; None when there are none."""
    total = copies["duration_ns"].sum()
    return float(gbps(copies["bytes"].sum(), total)) if len(copies) and total else None


def _probe_solo(probe: dict | None, memory: str) -> float | None:
    if not probe:
        return None
    v = probe.get("verdict", {}).get(memory.lower())
    return float(np.mean(v["solo_gbps"])) if v and v.get("solo_gbps") else None


def shared_capacity(probe: dict | None, n_gpus: int, link_gbps: float) -> tuple[float, str]:
    """The host's DtoH capacity for all GPUs at once: measured by the probe, else n x the link speed (nominal)."""
    v = (probe or {}).get("verdict", {}).get("pinned") or {}  # the sum of per-GPU rates while all GPUs copy
    if v.get("together_gbps") and len(v.get("solo_gbps", [])) == n_gpus:
        return float(v["together_gbps"]), f"measured by the link probe, {n_gpus} GPUs at once"
    return n_gpus * link_gbps, f"nominal: {n_gpus} x {link_gbps:g} GB/s"
