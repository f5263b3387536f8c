"""The scaling verdict of unprofiled runs (`nsys-transfer scaling`): N GPUs against N x one GPU, and what limits it."""
from __future__ import annotations


def scaling_row(scenario: dict) -> dict | None:
    """N-GPU total against N x the one-GPU run, the CPUs' load in both, and what limits scaling when it falls short."""
    one, every = scenario.get("one"), scenario.get("all")
    if not (one and every and "throughput" in one and "throughput" in every):
        return None
    single, total = one["throughput"]["steps_per_s"], every["throughput"]
    n = total.get("world_size", 1)
    eff = total["steps_per_s"] / (n * single) if single else None
    cpu = every.get("host_cpu")
    if eff is None or eff >= 0.9:
        limit = "scales (>= 0.9 x N x single)"
    elif cpu and cpu["busy"] >= 0.9:
        limit = f"host CPU cores: {cpu['busy_cores']:.1f} of {cpu['cpus']} busy ({cpu['busy']:.0%}) with {n} GPUs"
    else:
        limit = ("not the host CPUs" + (f" ({cpu['busy']:.0%} busy)" if cpu else " (no CPU reading)")
                 + ": see the traces' per-GPU rows")
    return {"label": scenario.get("label", ""), "stage": every.get("stage"), "gpus": n, "single_steps_per_s": single,
            "total_steps_per_s": total["steps_per_s"], "per_rank_steps_per_s": total.get("per_rank_steps_per_s"),
            "efficiency": eff, "integrity_ok": every["integrity"]["ok"] and one["integrity"]["ok"],
            "gpu": one.get("environment", {}).get("gpu"), "cpus": one.get("environment", {}).get("cpus"),
            "host_cpu_single": one.get("host_cpu"), "host_cpu": cpu, "limit": limit}
