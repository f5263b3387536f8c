"""The scaling verdict of unprofiled runs (`nsys-transfer scaling`): N GPUs against N x one GPU, and what limits it."""
from __future__ import annotations

from nsys_transfer.analysis.rules.facts import CpuLoad
from nsys_transfer.analysis.rules.ranks import ScalingContext, scaling_verdict


def scaling_row(scenario: dict) -> dict | None:
    """N-GPU total against N x the one-GPU run, the CPUs' load in both, and what limits scaling (`limit`: the finding
    of analysis/rules/ranks.py's scaling rules); None when a run measured nothing."""
    one, every = scenario.get("one"), scenario.get("all")
    if not (one and every and "throughput" in one and "throughput" in every):
        return None
    single, total = one["throughput"]["steps_per_s"], every["throughput"]
    n = total.get("world_size", 1)
    eff = total["steps_per_s"] / (n * single) if single else None
    cpu = every.get("host_cpu")
    limit = scaling_verdict(ScalingContext(n, eff, CpuLoad.of(cpu))).as_dict()
    return {"label": scenario.get("label", ""), "stage": every.get("stage"), "gpus": n, "single_steps_per_s": single,
            "total_steps_per_s": total["steps_per_s"], "per_rank_steps_per_s": total.get("per_rank_steps_per_s"),
            "efficiency": eff, "integrity_ok": every["integrity"]["ok"] and one["integrity"]["ok"],
            "gpu": one.get("environment", {}).get("gpu"), "cpus": one.get("environment", {}).get("cpus"),
            "host_cpu_single": one.get("host_cpu"), "host_cpu": cpu, "limit": limit}
