"""Steady-state throughput of every stage, unprofiled (tracing distorts it): one JSON and a table.

Each stage runs in its own process (`python -m workloads`), so one failing stage does not stop the rest.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ARTICLE_ORDER = ["ceiling", "naive-input", "baseline", "multiproc", "bufpool", "async", "streams", "pinned"]


def run_stage(stage: str, args: list[str], log=print, timeout_s: float | None = None, label: str = "",
              launcher: list[str] | None = None) -> dict:
    """One unprofiled run of a stage in its own process; launcher: what starts Python (torchrun, taskset ...)."""
    with tempfile.TemporaryDirectory() as tmp:
        rec_path = os.path.join(tmp, "run.json")
        cmd = [*(launcher or [sys.executable]), "-m", "workloads", "--stage", stage, *args, "--json", rec_path]
        t = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc = subprocess.CompletedProcess(cmd, -9, "", f"timed out after {timeout_s:.0f} s")
        if os.path.exists(rec_path):
            with open(rec_path) as f:
                rec = json.load(f)
        else:
            rec = {"stage": stage, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["failed"]}
        rec["command"] = " ".join(cmd[1:-2])
        rec["exit_code"] = proc.returncode
        if label:
            rec["label"] = label
        log(f"{label or stage:>12}: " + (f"{rec['throughput']['steps_per_s']:.3f} steps/s, integrity "
                               f"{'ok' if rec['integrity']['ok'] else 'FAILED'}" if "throughput" in rec
                               else f"failed ({rec['error'][0]})") + f"  [{time.time() - t:.0f} s]", file=sys.stderr)
        return rec


def table(records: list[dict]) -> str:
    base = next((r["throughput"]["steps_per_s"] for r in records
                 if r.get("stage") == "baseline" and "throughput" in r and not r.get("label")), None)
    ceil = next((r["throughput"]["steps_per_s"] for r in records
                 if r.get("stage") == "ceiling" and "throughput" in r and not r.get("label")), None)
    lines = ["| stage | steps/s | vs baseline | vs ceiling | integrity | steps |", "|---|---|---|---|---|---|"]
    for r in records:
        name = r.get("label") or r["stage"]
        if "throughput" not in r:
            lines.append(f"| {name} | failed | | | {r['error'][0]} | |")
            continue
        s = r["throughput"]["steps_per_s"]
        integ = r["integrity"]
        lines.append(f"| {name} | {s:.2f} | {s / base:.2f}x |" if base else f"| {name} | {s:.2f} | |")
        lines[-1] += (f" {100 * s / ceil:.0f}% |" if ceil else " |")
        lines[-1] += (" n/a |" if not integ["checked"] else (" ok |" if integ["ok"] else " FAILED |"))
        lines[-1] += f" {r['throughput']['steps']} |"
    return "\n".join(lines)


def scaling_launchers(gpus: int, cpus: str | None) -> tuple[list[str], list[str]]:
    """(one GPU, N GPUs under torchrun), both confined to the CPU list `cpus` (taskset syntax) when given."""
    pin = ["taskset", "-c", cpus] if cpus else []
    return [*pin, sys.executable], [*pin, sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus)]


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
