"""Steady-state throughput of every stage, unprofiled (tracing distorts it): one JSON and a table.

Each stage runs in its own process (`python -m nsys_transfer.workloads`), so one failing stage does not stop the rest.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def run_stage(stage: str, args: list[str], log=print, timeout_s: float | None = None, label: str = "",
              launcher: list[str] | None = None) -> dict:
    """One unprofiled run of a stage in its own process; launcher: what starts Python (torchrun, taskset ...)."""
    with tempfile.TemporaryDirectory() as tmp:
        rec_path = os.path.join(tmp, "run.json")
        cmd = [*(launcher or [sys.executable]), "-m", "nsys_transfer.workloads", "--stage", stage, *args,
               "--json", rec_path]
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
    """The records as a Markdown table: steps/s, against baseline and ceiling, integrity."""
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
