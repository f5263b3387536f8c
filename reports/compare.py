"""One row per stage: the article's results table, computed from analyses and bench records."""
from __future__ import annotations

import pandas as pd

from analysis.copies import big_copies


def stage_row(stage: str, analysis, bench: dict | None) -> dict:
    s, t = analysis.summary, analysis.tables
    d = big_copies(t["memcpy"], "DtoH")
    steps = s["steps"]
    row = {
        "stage": stage,
        "steps_per_s": bench["throughput"]["steps_per_s"] if bench else steps["per_second"],
        "throughput_source": "bench (unprofiled)" if bench else "trace",
        "trace_steps_per_s": steps["per_second"],
        "integrity": (("ok" if bench["integrity"]["ok"] else "FAILED") if bench and bench["integrity"]["checked"]
                      else ("n/a" if bench else "")),
        "gpu_utilization": s["gpu"]["utilization"] if s["gpu"] else None,
        "compute_utilization": s["gpu"]["compute_utilization"] if s["gpu"] else None,
        "gap_per_step_ms": (s["gaps"]["per_step_ns"] or 0) / 1e6 if s["gaps"]["per_step_ns"] is not None else None,
        "dtoh_ms": float(d["duration_ns"].mean() / 1e6) if len(d) else None,
        "dtoh_gbps": float(d["bytes"].sum() / d["duration_ns"].sum()) if len(d) else None,
        "dtoh_memory": ", ".join(sorted(set(d["dst_kind"]))) if len(d) else "",
        "dtoh_overlap": float(d["overlap_ns"].sum() / d["duration_ns"].sum()) if len(d) else None,
        "captured_steps": steps["count"],
        "diagnosis": s["diagnosis"],
    }
    return row


def results_table(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    base = df.loc[df["stage"] == "baseline", "steps_per_s"]
    df["speedup_vs_baseline"] = df["steps_per_s"] / base.iloc[0] if len(base) and base.iloc[0] else None
    ceil = df.loc[df["stage"] == "ceiling", "steps_per_s"]
    df["of_ceiling"] = df["steps_per_s"] / ceil.iloc[0] if len(ceil) and ceil.iloc[0] else None
    return df
