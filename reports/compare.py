"""One row per stage: the article's results table, computed from analyses and bench records."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..analysis.result import Document, Result
from ..analysis.facade import NotComparable, Side, big_copies, loop_of, scaling_row, verify
from ..analysis.render.plots import plot_breakdown
from ..analysis.render.verify_text import verify_report as render_verify
from ..nsys_core.contracts import STAGES, gbps, name_says


def stage_row(stage: str, analysis, bench: dict | None) -> dict:
    """One row of the results table: the bench's throughput if there is one, the rest from the stage's analysis
    (analysis.doc; bench is the bench's own record, read by its keys)."""
    doc, t = analysis.doc, analysis.tables
    d = big_copies(t["memcpy"], "DtoH")
    steps, gpu = doc.steps, doc.gpu
    failed = run_failed(doc)
    traced_rate = None if failed else steps.per_second  # a failed run's steps are no throughput
    row = {
        "stage": stage,
        "run": failed,
        "steps_per_s": bench["throughput"]["steps_per_s"] if bench else traced_rate,
        "throughput_source": "bench (unprofiled)" if bench else "trace",
        "trace_steps_per_s": traced_rate,
        "integrity": (("ok" if bench["integrity"]["ok"] else "FAILED") if bench and bench["integrity"]["checked"]
                      else ("n/a" if bench else "")),
        "gpu_utilization": gpu.utilization if gpu else None,
        "compute_utilization": gpu.compute_utilization if gpu else None,
        "gap_per_step_ms": steps.mean_gpu_idle_ns / 1e6 if steps.mean_gpu_idle_ns is not None else None,
        "dtoh_ms": float(d["duration_ns"].mean() / 1e6) if len(d) else None,
        "dtoh_gbps": float(gbps(d["bytes"].sum(), d["duration_ns"].sum())) if len(d) else None,
        "dtoh_memory": ", ".join(sorted(set(d["dst_kind"]))) if len(d) else "",
        "dtoh_overlap": (float(d["overlap_ns"].sum() / d["duration_ns"].sum()) if len(d) and gpu and
                         gpu.compute_utilization is not None else None),  # no kernels recorded: unknown
        "cannot_give": _cannot_give(doc),
        "captured_steps": steps.count,
        "diagnosis": doc.diagnosis,
        **cpu_figures(doc),
    }
    return row


def cpu_figures(doc: Document) -> dict:
    """A capture without GPU work's own figures (its GPU ones are empty): the set-up before its loop, and its loop's
    costliest line of the program with that line's share of the loop and its role (the cpu-hotspot findings)."""
    setup = doc.code.setup if doc.code else None
    top = next((f for f in doc.diagnosis if f.rule == "cpu-hotspot" and f.line), None)
    return {"setup_s": setup.ns / 1e9 if setup else None,
            "top_line": f"{top.subject} {top.line.role}, {top.impact_fraction:.0%}" if top else ""}


def run_failed(doc: Document) -> str:
    """"FAILED (exit 1)" when the traced program failed (trace.program_end), else ""."""
    end = doc.trace.program_end
    if not end.failed:
        return ""
    return f"FAILED (exit {end.exit_code})" if end.exit_code is not None else "FAILED"


NO_GPU = "no GPU activity: every GPU figure"


def _cannot_give(doc: Document) -> list[str]:
    """What this trace's row leaves empty and why: figures from tables the export lacks, or from a lossy capture."""
    out = []
    if run_failed(doc):
        out.append("the program failed: no throughput (fix it and trace it again)")
    if doc.gpu and doc.gpu.compute_utilization is None:
        out.append("no kernel table: compute and overlap")
    if not doc.gpu:
        out.append(NO_GPU)
    integ = doc.trace.integrity
    if integ.verdict == "lossy":
        out.append(f"the capture lost CUDA events ({integ.lost_fraction or 0:.0%}): its GPU figures count only "
                   "what was recorded")
    if integ.verdict == "doubtful":
        out.append("nsys questions the capture's completeness (analyze-trace --check says what it said): its figures "
                   "count only what nsys recorded")
    return out


def results_table(rows: list[dict]) -> pd.DataFrame:
    """The rows as a table, with each stage's speed-up over baseline and share of the ceiling."""
    df = pd.DataFrame(rows)
    if df.empty:  # multi-GPU runs alone (per-rank traces): no stage table
        return df
    base = df.loc[df["stage"] == "baseline", "steps_per_s"]
    df["speedup_vs_baseline"] = df["steps_per_s"] / base.iloc[0] if len(base) and base.iloc[0] else None
    ceil = df.loc[df["stage"] == "ceiling", "steps_per_s"]
    df["of_ceiling"] = df["steps_per_s"] / ceil.iloc[0] if len(ceil) and ceil.iloc[0] else None
    return df


def gpu_rows(run: str, ranks) -> list[dict]:
    """One row per GPU of a multi-GPU run, plus the run's shared-resource verdict on each row: the host-side figures
    of the GPU's own host when the GPUs ran on several (`ranks.hosts[]`)."""
    r = ranks.part
    worst = min((c for c in r.contention if c.slowdown is not None), key=lambda c: c.slowdown, default=None)
    one = (r.host_dtoh, worst.slowdown if worst else None)
    hosts = {h.host: (h.host_dtoh, h.slowdown) for h in r.hosts or ()}
    out = []
    for g in r.gpus:
        load, slowdown = hosts[g.host] if hosts else one
        out.append({"run": run, "gpu": g.gpu, "steps_per_s": g.steps_per_s, "utilization": g.utilization,
                    "compute_utilization": g.compute_utilization, "dtoh_gbps": g.dtoh_gbps,
                    "dtoh_pinned_share": g.dtoh_pinned_share, "idle_mostly_in": g.idle_mostly_in,
                    "idle_share": g.idle_share, "host_peak_gbps": load.peak_gbps,
                    "capacity_gbps": load.capacity_gbps, "slowdown": slowdown, "limit": r.limit.rule})
    return out


def scaling_summary(record: dict | None) -> list[dict]:
    """Unprofiled N-GPU totals against N x the single-GPU run, one row per scenario of a `make scaling` record
    ({"scenarios": [{"label", "one", "all"}, ...]})."""
    if not record:
        return []
    rows = [scaling_row(s) for s in record.get("scenarios") or []]
    return [r for r in rows if r]


def is_pair(names: list[str]) -> bool:
    """Two traces of a user's program (not the toolkit's stages): the report compares them as verify does."""
    return len(names) == 2 and not any(n.split("-long")[0] in STAGES for n in names)


def pair_order(names: list[str], paths: list) -> list[int]:
    """Which of two traces is the before and which the after: by their names where they say it (`before`, `after`,
    `my_fixed`: the README's names sort `after` first), else the older capture first."""
    says = [name_says(n) for n in names]
    if says[0] == "after" and says[1] != "after" or says[1] == "before" and says[0] != "before":
        return [1, 0]
    if any(says):
        return [0, 1]
    mtimes = [Path(p).stat().st_mtime if Path(p).exists() else 0 for p in paths]
    return [0, 1] if mtimes[0] <= mtimes[1] else [1, 0]


def before_after(names: list[str], paths: list, analyses: list[Result], out_dir) -> tuple[str, str | None] | None:
    """For exactly two traces of a user's program: `nsys-transfer verify`'s comparison of their steady states
    (`analyses`: each one's analysis, as verify makes it) as text, and the breakdown chart of both whole captures (None,
    and said in the text, when neither trace has GPU time to share out); None when they are the toolkit's stages or
    cannot be compared (the reason is in the text)."""
    if not is_pair(names):
        return None
    cpu = not any(a.doc.gpu for a in analyses)  # no GPU work: verify compares the two loops, read from the traces
    # verify's Side, facade.loop_of and render's plot_breakdown take the summary
    sides = [Side(str(p), a.doc, None, n, loop=loop_of(p, a.doc) if cpu else None)
             for n, p, a in zip(names, paths, analyses)]
    order = pair_order(names, paths)
    sides, names, analyses = ([x[i] for i in order] for x in (sides, names, analyses))
    try:
        text = render_verify(verify(*sides).document)
    except NotComparable as e:
        text = f"not comparable: {e}"
    if plot_breakdown([a.doc for a in analyses], names, out_dir / "before_after.png",
                      title="where the GPU's time went") is None:
        return text + "\n(no breakdown chart: neither trace has GPU activity)", None
    return text, "before_after.png"
