"""Holistic Trace Analysis's figures beside analyze-trace's on the same torch.profiler traces (issue 58, item 8):
for each trace, the GPU's idle share, its compute share, and the share of the idle time that has a cause, from both.

    python benchmarks/hta_side_by_side.py --hta /tmp/hta/bin/python TRACE.json[.gz] ... [--json out.json]

HTA (pip install HolisticTraceAnalysis, in a scratch venv: it pins its own pandas) reads a folder of per-rank traces;
each trace is linked alone into a folder of its own as rank0.json (.json.gz kept), and HTA's TraceAnalysis then gives
  get_temporal_breakdown(): idle_time_pctg, compute_time_pctg (of the GPU's span, first to last kernel of the rank);
  get_idle_time_breakdown(): the idle time split into host wait, kernel wait and other; "with a cause" is
  1 - other / idle (HTA's own category for idle it cannot explain).
analyze-trace's, from its --json: idle = 1 - gpu.utilization (the window: first to last GPU operation, or the steady
state past the set-up: `window.source` says which), compute = gpu.compute_utilization, and "with a cause" the share of
idle.causes whose cause is not `cpu` without a subject (idle time outside any range and CUDA call, which a
torch.profiler trace cannot tell computing from waiting in the OS). The two windows differ where analyze-trace leaves
set-up out: the table gives each one's window.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTA_SCRIPT = r"""
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
t = a.get_temporal_breakdown(visualize=False)
row = t.iloc[0]
out = {"idle_pct": float(row["idle_time_pctg"]), "compute_pct": float(row["compute_time_pctg"]),
       "non_compute_pct": float(row["non_compute_time_pctg"]), "span_us": float(row["idle_time(us)"] +
       row["compute_time(us)"] + row["non_compute_time(us)"])}
try:
    b = a.get_idle_time_breakdown(visualize=False)
    df = b[0] if isinstance(b, tuple) else b
    df = df[df["rank"] == 0] if "rank" in df else df
    by = df.groupby("idle_category")["idle_time"].sum()
    idle = float(by.sum())
    out["idle_by_category_us"] = {str(k): float(v) for k, v in by.items()}
    out["with_cause_pct"] = 100.0 * (1 - float(by.get("other", 0.0)) / idle) if idle else None
except Exception as e:  # HTA's idle breakdown fails on some traces: say so in the row
    out["idle_breakdown_error"] = f"{type(e).__name__}: {str(e)[:160]}"
print("HTA_RESULT " + json.dumps(out))
"""


def hta(python: str, trace: Path, work: Path) -> dict:
    """HTA's figures of one trace (a row with `error` where HTA fails)."""
    folder = work / f"hta-{trace.name}"
    folder.mkdir()
    (folder / ("rank0.json.gz" if trace.name.endswith(".gz") else "rank0.json")).symlink_to(trace.resolve())
    script = work / "hta_run.py"
    script.write_text(HTA_SCRIPT)
    p = subprocess.run([python, str(script), str(folder)], capture_output=True, text=True, timeout=1800)
    line = next((x for x in p.stdout.splitlines() if x.startswith("HTA_RESULT ")), None)
    if line is None:
        tail = (p.stderr or p.stdout).strip().splitlines()
        return {"error": tail[-1][:200] if tail else f"exit {p.returncode}"}
    return json.loads(line[len("HTA_RESULT "):])


def ours(trace: Path, work: Path) -> dict:
    """analyze-trace's figures of one trace, from its --json."""
    out = work / f"ours-{trace.name}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "nsys_transfer.analysis", str(trace), "--json", str(out), "-q"],
                       capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else f"exit {p.returncode}"}
    s = json.loads(out.read_text())
    g = s.get("gpu")
    if not g:
        return {"error": "no GPU work (CPU-only capture)"}
    causes = (s.get("idle") or {}).get("causes") or []
    idle = sum(c["idle_ns"] for c in causes)
    unknown = sum(c["idle_ns"] for c in causes if c["cause"] == "cpu" and not c.get("subject"))
    verdict = next((f for f in s["diagnosis"] if f["severity"] != "info" or f["rule"] == "too-little-to-judge"), None)
    return {"idle_pct": 100 * (1 - g["utilization"]), "compute_pct": 100 * g["compute_utilization"],
            "with_cause_pct": 100 * (1 - unknown / idle) if idle else None,
            "window_ms": s["window"]["duration_ns"] / 1e6, "window": s["window"]["source"],
            "verdict": f"{verdict['rule']}" + (f" ({verdict['subject']})" if verdict and verdict["subject"] else "")
            if verdict else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--hta", required=True, help="the Python of a venv with HolisticTraceAnalysis installed")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in args.traces:
            rows.append({"trace": t.name, "ours": ours(t, Path(tmp)), "hta": hta(args.hta, t, Path(tmp))})
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
