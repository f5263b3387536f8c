"""The machine in the trace: the host link speed of its GPU, for every "% of the link" figure.

Nominal usable rate per PCIe generation, x16: PCI-SIG's raw rates (gen3 8 GT/s, gen4 16 GT/s, gen5 32 GT/s per lane,
128b/130b coding: 15.75, 31.5 and 63.0 GB/s per direction) times 0.85, the share left after packet headers and flow
control that CUDA's bandwidthTest typically reaches with pinned memory (gen3 ~13, gen4 ~26 GB/s). The H200 machine
of this project measured 55 GB/s pinned DtoH on gen5 (docs/benchmarks.md): above the nominal 53.6, so the fastest
large pinned copy in a trace raises the figure when it is faster.
"""
from __future__ import annotations

import re

import pandas as pd
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class HostLink:
    """The host link of the trace's own GPU: its GB/s, where that came from, its PCIe generation."""
    gbps: float | None
    source: str
    pcie_gen: int | None

PCIE_X16_RAW_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}
USABLE_SHARE = 0.85
MIN_PROBE_BYTES = 1 << 20   # a copy this large runs at link speed, not at its launch latency

# chip name prefix (TARGET_INFO_GPU.chipName) -> PCIe generation of the boards built on it
CHIP_GEN = (("GK", 3), ("GM", 3), ("GP", 3), ("GV", 3), ("TU", 3), ("GA", 4), ("AD", 4), ("GH", 5), ("GB", 5))
# 2020-era exports have no chipName: the marketing name says the architecture
NAME_GEN = ((r"H100|H200|H800|GH200", 5), (r"B100|B200|RTX 50\d\d|RTX PRO", 5),
            (r"A100|A800|A30|A40|A10|A16|A2\b|RTX 30\d\d|RTX A\d|L4|L40|RTX 40\d\d|Ada", 4),
            (r"V100|TITAN V|TITAN RTX|TITAN Xp?\b|T4|RTX 20\d\d|GTX 16\d\d|RTX [468]000|Quadro RTX|Quadro [PMK]\d+|"
             r"P100|GP100|P40|P4\b|GTX 10\d\d|GTX 9\d\d|Tesla [KMP]\d+|K80|M60|M40", 3))


def nominal_gbps(gen: int) -> float:
    """Usable GB/s of a PCIe x16 link of this generation."""
    return round(PCIE_X16_RAW_GBPS[gen] * USABLE_SHARE, 1)


def pcie_generation(chip: str | None, name: str | None) -> tuple[int | None, str]:
    """(generation, what it was read from) for one GPU; (None, why) when neither name is known."""
    for prefix, gen in CHIP_GEN:
        if chip and chip.upper().startswith(prefix):
            return gen, f"chip {chip}"
    for pattern, gen in NAME_GEN:
        if name and re.search(pattern, name, re.IGNORECASE):
            return gen, f"GPU name {name}"
    return None, f"unknown GPU {chip or name or '(not listed)'}"


def fastest_pinned_gbps(copies: pd.DataFrame) -> float | None:
    """The fastest large host<->device copy with pinned host memory: the link shows at least this."""
    if copies.empty:
        return None
    host = copies["dst_kind"].where(copies["copy_kind"] == "DtoH", copies["src_kind"])
    big = copies[(copies["copy_kind"].isin(["DtoH", "HtoD"])) & (host == "Pinned") & (copies["bytes"] >= MIN_PROBE_BYTES)
                 & (copies["duration_ns"] > 0)]
    return float((big["bytes"] / big["duration_ns"]).max()) if len(big) else None


def host_link(gpus: pd.DataFrame, copies: pd.DataFrame, user_gbps: float | None = None) -> HostLink:
    """The link's gbps, source and pcie_gen: the user's figure, else the nominal rate of the slowest GPU's PCIe generation, raised
    to the fastest large pinned copy when that is faster; gbps None when the GPU is unknown and no copy shows it."""
    seen = fastest_pinned_gbps(copies)
    if user_gbps:
        # a figure the trace contradicts is kept (the user may mean another machine's link), and the contradiction said
        faster = f"; the trace's fastest pinned copy ran at {seen:.1f} GB/s, faster" if seen and seen > user_gbps else ""
        return HostLink(gbps=float(user_gbps), source="--link-gbps" + faster, pcie_gen=None)
    gens = [pcie_generation(r.get("chip"), r.get("name")) for r in gpus.to_dict("records")] if len(gpus) else []
    known = [g for g in gens if g[0] is not None]
    if known:
        gen, why = min(known)
        gbps, source = nominal_gbps(gen), f"PCIe gen{gen} x16 nominal ({why})"
        if seen and seen > gbps:
            gbps, source = seen, f"fastest pinned copy in the trace (above the PCIe gen{gen} x16 nominal {gbps:.1f})"
        return HostLink(gbps=round(gbps, 1), source=source, pcie_gen=gen)
    if seen:
        return HostLink(gbps=round(seen, 1), source="fastest pinned copy in the trace (GPU model unknown)",
                        pcie_gen=None)
    return HostLink(gbps=None, source=gens[0][1] if gens else "no GPU listed in the trace", pcie_gen=None)


def cpu_cores(trace) -> int | None:
    """The capture machine's CPU cores (nsys's TARGET_INFO_SYSTEM_ENV), None where the trace does not say (a
    torch.profiler trace)."""
    if getattr(trace, "profiler", None) == "torch.profiler" or not trace.has("TARGET_INFO_SYSTEM_ENV"):
        return None
    row = trace.connection().execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CpuCores'").fetchone()
    try:
        return int(row[0]) if row else None
    except (TypeError, ValueError):
        return None
