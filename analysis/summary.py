"""All analyses of one trace, as tables (DataFrames) and as the documented JSON (docs/json-schema.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import copies as cp
from . import cpu, gpu
from .intervals import Coverage, union
from .trace import Trace, pid_of

SCHEMA = "nsys-transfer.analysis/1"


@dataclass
class Options:
    min_gap_ns: int = 1_000_000
    step_regex: str = cpu.DEFAULT_STEP_REGEX
    window: tuple[int, int] | None = None
    top: int = 10
    pipeline_depth: int = 10
    bin_ns: int = 10_000_000   # host DtoH bandwidth timeline
    link_gbps: float = 55.0


@dataclass
class Analysis:
    """The computed tables and the JSON summary of one trace."""
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def analyze(trace: Trace, opts: Options | None = None, progress=None) -> Analysis:
    opts = opts or Options()
    from .diagnosis import Context, diagnose
    say = progress or (lambda msg: None)
    # SQLite scans without the GIL: these load on background threads while this one does the GPU side
    trace.prefetch("osrt")              # the longest load: its own thread from the start
    trace.prefetch("api_rows", "nvtx")
    say("loading GPU activity")
    kernels, memcpys, memsets = trace.kernels, trace.memcpys, trace.memsets
    ops = gpu.gpu_ops(kernels, memcpys, memsets)
    window = gpu.analysis_window(ops, opts.window)
    tables: dict[str, pd.DataFrame] = {}
    out: dict = {"schema": SCHEMA}

    # --- GPU (NVTX and OS runtime are still loading on the other core) ---------------------------
    say("computing utilisation and gaps")
    if window is None:
        trace.wait("osrt", "nvtx")
        nvtx, osrt = trace.nvtx, trace.osrt
        span = pd.concat([nvtx[["start_ns", "end_ns"]], osrt[["start_ns", "end_ns"]]])
        out["window"] = ({"start_ns": int(span["start_ns"].min()), "end_ns": int(span["end_ns"].max()),
                          "source": "cpu (no GPU activity)"} if len(span) else {"source": "empty trace"})
        out["gpu"] = None
        gap_table = gpu.idle_gaps(ops.iloc[0:0], (0, 1), opts.min_gap_ns)
        busy = None
    else:
        lo, hi = window
        inside = (ops["end_ns"].to_numpy() > lo) & (ops["start_ns"].to_numpy() < hi)
        in_win = ops if inside.all() else ops[inside]  # no copy of millions of rows when nothing is cut
        out["window"] = {"start_ns": lo, "end_ns": hi, "duration_ns": hi - lo,
                         "source": "user" if opts.window else "first to last GPU operation"}
        passed = gpu.device_pass(in_win, window, opts.min_gap_ns)
        util, gap_table, busy = passed.util, passed.gaps, passed.busy
        names = dict(zip(trace.gpus["device"], trace.gpus["name"])) if len(trace.gpus) else {}
        util["name"] = util["device"].map(names)
        tables["utilization"] = util
        out["gpu"] = {"utilization": float(util["utilization"].mean()),
                      "compute_utilization": float(util["compute_utilization"].mean()),
                      "busy_ns": int(util["busy_ns"].sum()), "compute_ns": int(util["compute_ns"].sum()),
                      "devices": _records(util)}

    # --- copies -----------------------------------------------------------------------------------
    say("joining copies to their API calls")
    gap_ids = gap_table.nlargest(900, "duration_ns")["next_correlation_id"] if len(gap_table) else []
    if len(gap_table):  # which thread launched the work ending each gap: a runtime-table scan, in the background
        trace.prefetch_call("launch", trace.launch_threads, gap_ids)
    copies = cp.copy_table(memcpys, trace.memcpy_api, kernels) if len(memcpys) else memcpys.assign(
        sync=pd.Series(dtype="boolean"), overlap_ns=pd.Series(dtype="int64"), overlapped=pd.Series(dtype=bool),
        api_name=pd.Series(dtype=object), tid=pd.Series(dtype="int64"), blocking=pd.Series(dtype="boolean"),
        api_start_ns=pd.Series(dtype="int64"), api_end_ns=pd.Series(dtype="int64"))
    tables["memcpy"] = copies
    out["memcpy"] = {"dtoh": cp.copy_summary(copies, "DtoH"), "htod": cp.copy_summary(copies, "HtoD"),
                     "dtod": cp.copy_summary(copies, "DtoD"), "overlap_fraction": cp.overlap_fraction(copies),
                     "dtoh_on_compute_stream": cp.copies_on_compute_stream(copies, kernels),
                     "compute_stream": cp.stream_of_compute(kernels)}
    if window is not None:
        host = cp.host_bandwidth(copies, window, "DtoH", opts.bin_ns)
        tables["dtoh_host_timeline"] = host
        out["memcpy"]["dtoh_host"] = {
            "bin_ns": int(host["bin_ns"].iloc[0]) if len(host) else opts.bin_ns,
            "peak_gbps": float(host["gbps"].max()) if len(host) else 0.0,
            "mean_gbps": float(host["bytes"].sum() / (window[1] - window[0])),
            "devices": sorted(int(x) for x in copies.loc[copies["copy_kind"] == "DtoH", "device"].unique())}

    say("waiting for NVTX and OS runtime")
    trace.wait("osrt", "nvtx")
    nvtx, osrt = trace.nvtx, trace.osrt
    out = {"schema": SCHEMA, "trace": _trace_info(trace, kernels, memcpys, nvtx, osrt), **out}

    # --- steps ------------------------------------------------------------------------------------
    if busy is not None and len(out["gpu"]["devices"]) > 1:  # several ranks: each step against its own GPU
        owners = gpu.driving_process(kernels)
        busy_of = {int(p): passed.busy_by_device[int(d)] for d, p in owners.itertuples(index=False, name=None)
                   if int(d) in passed.busy_by_device}
        step_table = cpu.steps(nvtx, opts.step_regex, busy_of, copies)
    else:
        step_table = cpu.steps(nvtx, opts.step_regex, busy, copies)
    tables["steps"] = step_table
    n_steps = len(step_table)
    idle_per_step = float(step_table["gpu_idle_ns"].mean()) if n_steps and "gpu_idle_ns" in step_table else None
    out["steps"] = {"regex": opts.step_regex, "count": n_steps,
                    "per_second": cpu.steps_per_second(step_table, window[1] if window else None),
                    "mean_ns": float(step_table["duration_ns"].mean()) if n_steps else None,
                    "mean_gpu_idle_ns": idle_per_step}

    # --- gaps with their CPU context --------------------------------------------------------------
    say("finding what the CPU did during gaps")
    tables["gaps"] = gap_table
    launch = trace.result("launch") if len(gap_table) else None
    # (pid, correlation id) -> launching thread: ids repeat across the processes of a multi-rank trace; an export
    # without globalPid has pid -1 on every gap, and then the ids alone decide
    by_pid = len(gap_table) > 0 and bool((gap_table["next_pid"] >= 0).any())
    tid_of = ({(int(p) if by_pid else -1, int(c)): t for p, c, t in
               zip(launch["pid"], launch["correlation_id"], launch["global_tid"])}
              if launch is not None and len(launch) else {})
    launch_tids = set(tid_of.values())
    launch_pids = {pid_of(t) for t in launch_tids}
    if len(osrt) and launch_pids and len(gap_table):
        # only calls of the launching process that touch an idle gap matter here: select them once
        gcov = Coverage(*union(gap_table["start_ns"].to_numpy(), gap_table["end_ns"].to_numpy()))
        keep = np.isin(pid_of(osrt["global_tid"].to_numpy()), list(launch_pids))
        keep &= gcov.touches(osrt["start_ns"].to_numpy(), osrt["end_ns"].to_numpy())
        osrt_launch_proc = osrt[keep]
    else:
        osrt_launch_proc = osrt.iloc[0:0]
    per_thread = {tid: osrt_launch_proc[osrt_launch_proc["global_tid"].to_numpy() == tid] for tid in launch_tids}
    top = []
    for g in gap_table.nlargest(opts.top, "duration_ns").to_dict("records"):
        tid = tid_of.get((int(g["next_pid"]) if by_pid else -1, int(g["next_correlation_id"])))
        ctx = cpu.gap_context(g, nvtx, per_thread.get(tid, osrt.iloc[0:0]), tid)
        top.append({"device": int(g["device"]), "start_ns": int(g["start_ns"]), "duration_ns": int(g["duration_ns"]),
                    "launch_tid": int(tid) & 0xFFFFFF if tid is not None else None, **ctx})
    covered = cpu.gap_cover_by_range(gap_table, nvtx, launch_tids, opts.step_regex)
    osrt_gaps = cpu.osrt_in_gaps(gap_table, osrt_launch_proc)
    tables["gap_ranges"], tables["gap_osrt"] = covered, osrt_gaps
    total_gap = int(gap_table["duration_ns"].sum()) if len(gap_table) else 0
    out["gaps"] = {"threshold_ns": opts.min_gap_ns, "count": int(len(gap_table)), "total_ns": total_gap,
                   "per_step_ns": idle_per_step,
                   "top": top, "covered_by": _records(covered.head(opts.top)), "osrt": _records(osrt_gaps.head(opts.top))}

    # --- kernels and NVTX -------------------------------------------------------------------------
    tk = gpu.top_kernels(kernels, opts.top)
    tables["kernels_top"] = tk
    out["kernels"] = {"count": int(len(kernels)), "total_ns": int(kernels["duration_ns"].sum()) if len(kernels) else 0,
                      "top": _records(tk)}
    ns = cpu.nvtx_summary(nvtx)
    tables["nvtx_summary"] = ns
    out["nvtx"] = {"count": int(len(nvtx)), "ranges": _records(ns)}
    say("diagnosing")
    out["diagnosis"] = diagnose(Context(out, {**tables, "kernels_all": kernels}, opts.pipeline_depth, opts.link_gbps))
    out["warnings"] = sorted(set(trace.warnings))  # rows a damaged export made us drop (analysis.validate)
    return Analysis(out, tables)


def summarize(trace: Trace, **kw) -> dict:
    return analyze(trace, Options(**kw)).summary


def _trace_info(trace: Trace, kernels, memcpys, nvtx, osrt) -> dict:
    return {"path": trace.source, "nsys_version": trace.nsys_version,
            "gpus": _records(trace.gpus) if len(trace.gpus) else [],
            "counts": {"kernels": int(len(kernels)), "memcpys": int(len(memcpys)), "nvtx_ranges": int(len(nvtx)),
                       "osrt_calls": int(len(osrt))}}


def _records(df: pd.DataFrame) -> list[dict]:
    """JSON-safe rows: numpy scalars to Python, NaN to None."""
    out = []
    for row in df.to_dict("records"):
        clean = {}
        for k, v in row.items():
            if hasattr(v, "item"):
                v = v.item()
            if isinstance(v, float) and v != v:
                v = None
            clean[str(k)] = v
        out.append(clean)
    return out
