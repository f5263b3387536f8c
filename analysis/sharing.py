"""What several GPUs share on the host, and the verdict on what limits them.

contention(): how fast DtoH copies run while another GPU copies, against their solo rate. shared_capacity(): the
host's DtoH capacity for all GPUs at once. limiting_resource(): the per-GPU rows, the contention and the run record
turned into one named limit with its evidence and the next fix. Pure functions of DataFrames and dicts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsys_transfer.nsys_core.contracts import gbps

if TYPE_CHECKING:
    from nsys_transfer.analysis.ranks import RankOptions


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
        return float(v["together_gbps"]), f"measured by the link probe ({n_gpus} GPUs at once)"
    return n_gpus * link_gbps, f"nominal: {n_gpus} x {link_gbps:g} GB/s"


def limiting_resource(devices: pd.DataFrame, cont: pd.DataFrame, host: dict, opts: RankOptions,
                      concurrent: bool = True) -> dict:
    """Which resource limits the GPUs, with its evidence and the next fix.

    resource: gpu-compute (every GPU's kernels run at least busy_threshold of its steps), host-dtoh-bandwidth
    (copies run below slowdown_threshold of their solo rate while other GPUs copy, and the GPUs wait), rank-pipeline
    (GPUs wait, nothing shared is slowed: the cause is inside each rank), host-cpu (the run record's shared CPUs are
    saturated while the GPUs wait, or while every rank's outputs are backlogged), output-backlog (backlogged outputs
    without a run record or with idle CPUs), single-gpu (nothing is shared) or not-concurrent (separate traces whose
    captures do not overlap in time: sharing cannot be seen)."""
    n = len(devices)
    compute_min = float(devices["compute_utilization"].min()) if n else 0.0
    worst = cont.dropna(subset=["slowdown"]).sort_values("slowdown").head(1)
    slow = float(worst["slowdown"].iloc[0]) if len(worst) else None
    peak_share = host["peak_gbps"] / host["capacity_gbps"] if host["capacity_gbps"] else 0.0
    evidence = _evidence(devices, cont, host)
    if n < 2:
        return {"resource": "single-gpu", "verdict": "one GPU in the trace(s): no resource is shared",
                "evidence": evidence, "next": "analyze-trace's diagnosis covers a single GPU"}
    if not concurrent:
        return {"resource": "not-concurrent",
                "verdict": "the traces' captures do not overlap in time (by their session clocks), so what the GPUs "
                           "share cannot be measured; each GPU's own row still holds",
                "evidence": evidence, "next": "record the ranks together: `make profile STAGE=... GPUS=N`"}
    contended = slow is not None and slow < opts.slowdown_threshold
    backlog = devices["backlog_steps"].dropna()
    backlog_min = float(backlog.min()) if len(backlog) == n else 0.0
    cpu = (opts.run or {}).get("host_cpu")
    if backlog_min:
        evidence.append(f"after their last step the ranks still drained outputs for "
                        f"{', '.join(f'{r.drain_ns / 1e6:,.0f} ms' for r in devices.itertuples())} "
                        f"(>= {backlog_min:.1f} step periods)")
    if cpu:
        evidence.append(f"host CPUs {cpu['busy']:.0%} busy ({cpu['busy_cores']:.1f} of {cpu['cpus']}) over the run")
    if compute_min >= opts.busy_threshold and backlog_min >= opts.backlog_steps:
        return _backlog_limit(backlog_min, cpu, evidence)
    if compute_min >= opts.busy_threshold:
        verdict = (f"every GPU runs kernels at least {compute_min:.0%} of the time: the GPUs themselves limit "
                   "throughput; " + (f"DtoH copies are slowed to {slow:.2f} x solo by sharing the host, hidden behind "
                                     "compute" if contended else "no shared host resource saturates"))
        return {"resource": "gpu-compute", "verdict": verdict, "evidence": evidence,
                "next": "make the model cheaper per batch (lower precision, channels_last, fused kernels) or add GPUs"}
    if contended:
        return {"resource": "host-dtoh-bandwidth",
                "verdict": f"the GPUs share the host's DtoH bandwidth and it saturates: {worst['memory'].iloc[0]} "
                           f"copies run at {slow:.2f} x their solo rate while other GPUs copy "
                           f"(peak {peak_share:.0%} of capacity), and kernels run only {compute_min:.0%} of the time",
                "evidence": evidence,
                "next": "move fewer bytes (argmax or bf16 on the GPU before the copy), stagger the ranks' copies, and "
                        "keep each rank's buffers on its GPU's NUMA node"}
    return _waiting_limit(devices, cpu, evidence)


def _evidence(devices: pd.DataFrame, cont: pd.DataFrame, host: dict) -> list[str]:
    """The evidence every verdict shows: each GPU's kernel share, the host-side DtoH rates, copies while shared."""
    evidence = [", ".join(f"{r.gpu}: kernels {r.compute_utilization:.0%} of its steps" for r in devices.itertuples()),
                f"host-side DtoH peak {host['peak_gbps']:.1f} GB/s, mean {host['mean_gbps']:.1f} GB/s; shared "
                f"capacity {host['capacity_gbps']:.1f} GB/s ({host['capacity_source']})"]
    for r in cont.itertuples():
        if r.gbps_together is not None:
            evidence.append(f"{r.memory} DtoH while another GPU copies: {r.gbps_together:.1f} GB/s"
                            + (f" = {r.slowdown:.2f} x solo {r.solo_gbps:.1f} GB/s ({r.solo_source})" if r.slowdown else ""))
    return evidence


def _backlog_limit(backlog_min: float, cpu: dict | None, evidence: list[str]) -> dict:
    """The verdict when the GPUs are busy and every rank's outputs are backlogged: host-cpu or output-backlog."""
    if cpu and cpu["busy"] >= 0.9:
        return {"resource": "host-cpu",
                "verdict": f"the GPUs finished their steps with every rank's output workers {backlog_min:.1f}+ "
                           f"steps behind, while the {cpu['cpus']} CPUs they share were {cpu['busy']:.0%} busy: the "
                           "host's cores saturate; in a longer run the buffers run out and the GPUs wait",
                "evidence": evidence,
                "next": "give the job more cores, or less CPU work per output (argmax or bf16 on the GPU before "
                        "the copy shrinks what the workers serialise)"}
    return {"resource": "output-backlog",
            "verdict": f"the GPUs finished their steps with every rank's output workers {backlog_min:.1f}+ steps "
                       "behind: the output side is slower than the GPUs, and a longer run would make them wait",
            "evidence": evidence,
            "next": "more output workers per rank if cores are free (the run record's host_cpu says), else less "
                    "work per output; capture more steps than the buffer pool to see the steady state"}


def _waiting_limit(devices: pd.DataFrame, cpu: dict | None, evidence: list[str]) -> dict:
    """The verdict when the GPUs wait and no shared copy is slowed: host-cpu if CPUs saturate, else rank-pipeline."""
    idle = devices.sort_values("compute_utilization").iloc[0]
    why = (f", waiting mostly in '{idle['idle_mostly_in']}' ({idle['idle_share']:.0%} of its compute gaps)"
           if isinstance(idle.get("idle_mostly_in"), str) else "")
    if cpu and cpu["busy"] >= 0.9:
        return {"resource": "host-cpu",
                "verdict": f"{idle['gpu']} runs kernels {idle['compute_utilization']:.0%} of the time{why}, while the "
                           f"{cpu['cpus']} CPUs the ranks share were {cpu['busy']:.0%} busy: the host's cores saturate",
                "evidence": evidence,
                "next": "give the job more cores, or less CPU work per output (argmax or bf16 on the GPU before the "
                        "copy); then the rank's own diagnosis (analyze-trace) names what is left"}
    pageable = (idle.get("dtoh_pinned_share") is not None and idle["dtoh_pinned_share"] < 0.5)
    return {"resource": "rank-pipeline",
            "verdict": f"{idle['gpu']} runs kernels {idle['compute_utilization']:.0%} of the time{why}, while "
                       "nothing shared is slowed: the limit is inside each rank's pipeline"
                       + ("; its outputs land in pageable memory" if pageable else ""),
            "evidence": evidence,
            "next": ("pin the output buffers in place (stage pinned)" if pageable else
                     "fix the rank's own pipeline: analyze-trace's diagnosis names the step")}
