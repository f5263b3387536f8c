"""All analyses of one trace, as tables (DataFrames) and as the documented JSON (docs/json-schema.md)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsys_transfer.nsys_core.contracts import gbps

from nsys_transfer.analysis.sections import copies as cp
from nsys_transfer.analysis.sections import cpu, gpu, idle, integrity, kernel_names, os_calls, program, unified
from nsys_transfer.analysis.load import sql
from nsys_transfer.analysis.load.span import capture_start
from nsys_transfer.analysis.rules import integrity as integrity_rules
from nsys_transfer.analysis.rules.base import Context
from nsys_transfer.analysis.rules.diagnosis import diagnose
from nsys_transfer.analysis.load.kernel_digest import KernelDigest
from nsys_transfer.analysis.sections.machine import host_link
from nsys_transfer.analysis.schema import SCHEMA, json_rows
from nsys_transfer.analysis.load.device import KERNEL_TABLE, digest_of
from nsys_transfer.analysis.load.frames import pid_of
from nsys_transfer.analysis.load.trace import Trace


@dataclass
class Options:
    """How to analyse one trace (analyze-trace's options); None means detect it from the trace."""
    min_gap_ns: int = 1_000_000
    step_regex: str | None = None       # None: detected from the NVTX names (cpu.detect_step_regex)
    window: tuple[int, int] | None = None
    top: int = 10
    pipeline_depth: int = 10
    bin_ns: int = 10_000_000   # host DtoH bandwidth timeline
    link_gbps: float | None = None      # None: from the trace's own GPU (machine.host_link)
    run_record: dict | None = None      # this toolkit's run record beside the trace, if any
    window_asked: object | None = None  # analysis.window.Spec: how the user gave `window` (--window or --steps)


@dataclass
class Analysis:
    """The computed tables and the JSON summary of one trace; gap_causes(device, spans) -> (cause, subject) of each
    idle span by the idle attribution's rules (for charts; None without an idle section)."""
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None


def analyze(trace: Trace, opts: Options | None = None, progress=None) -> Analysis:
    """Analyse one trace: the summary (JSON-able) and the tables behind it."""
    opts = opts or Options()
    say = progress or (lambda msg: None)
    _read_beside_gpu(trace)
    say("loading GPU activity")
    # a window the user gave is the window: the kernels, copies and ranges counted are the ones inside it
    digest = trace.device.kernel_digest if opts.window is None else _digest_inside(trace, opts.window)
    kernels = digest.ops
    trace.background.wait("device.memcpys", "device.memsets")
    memcpys = trace.device.memcpys if opts.window is None else _overlapping(trace.device.memcpys, opts.window)
    # a scan on the core the device pass leaves free: the runtime calls per kind
    trace.background.submit("call_counts", integrity.call_counts, trace)
    ops = gpu.gpu_ops(kernels, memcpys, trace.device.memsets)
    trace.background.wait("host.nvtx")
    nvtx = trace.host.nvtx
    step_regex, step_source = _step_regex(nvtx, opts)
    window = _window(ops, nvtx, step_regex, opts.window)
    tables: dict[str, pd.DataFrame] = {}
    # the whole capture's first event, read before the device pass may write over the kernel times (gpu.Spare)
    out: dict = {"schema": SCHEMA, "window": {"capture_start_ns": capture_start(trace)}}

    say("computing utilisation and gaps")
    passed, kernel_time = _device_section(trace, digest, ops, window, opts, out, tables)
    del ops
    if passed is None or len(passed.busy_by_device) <= 1:  # several GPUs: analysis.ranks reads the kernels next
        trace.forget("device.kernel_digest", "device.kernels", "device.memsets")  # millions of rows in a long capture: memory for the rest
    digest = digest.without_ops()
    # the copies' kernel time: from the kernels where the device pass did not give it (it never wrote over them then)
    kernels = kernels if kernel_time is None else None
    gaps = passed.gaps if passed is not None else gpu.idle_gaps(gpu.GpuOps({}), (0, 1), 1)
    trace.background.submit("launch", _launchers, trace, passed, gaps)  # a runtime scan, beside the copies
    say("joining copies to their API calls")
    copies = _copies_section(trace, memcpys, kernels, digest.compute_stream(), kernel_time, window, opts, out,
                             tables)
    tids = trace.background.result("launch")
    _read_beside_idle(trace, gaps, tids, opts.top)
    trace.background.wait("host.threads")
    out = {"schema": SCHEMA, "trace": _trace_section(trace, digest, memcpys, nvtx, copies, out["gpu"], opts), **out}
    _steps_section(digest, nvtx, copies, passed, window, step_regex, step_source, out, tables)

    kernel_section, tables["kernels_top"] = _kernels_section(trace, digest, opts.top)
    out["gaps"] = None  # filled below, once its OS calls are read; the JSON keeps its order
    say("attributing idle time")
    _idle_section(trace, passed, window, tids, trace.background.result("waits"), nvtx, copies, step_regex, opts, out, tables)
    say("finding what the CPU did during gaps")
    _gaps_section(gaps, tids, trace.background.result("gap_calls"), nvtx, step_regex, opts, out, tables)
    out["kernels"] = kernel_section

    shown = nvtx if opts.window is None else _overlapping(nvtx, opts.window)
    tables["nvtx_summary"] = ns = cpu.nvtx_summary(shown)
    out["nvtx"] = {"count": int(len(shown)), "ranges": json_rows(ns.head(max(opts.top, 20)))}
    out["trace"]["integrity"] = trace.background.result("integrity")
    say("diagnosing")
    out["diagnosis"] = diagnose(Context(out, tables, opts.pipeline_depth))
    out["trace"]["counts"]["osrt_calls"] = trace.osrt.count()  # after the scoped reads: they say if it is damaged
    out["warnings"] = sorted(set(trace.warnings))  # rows a damaged export made us drop (analysis.validate)
    out["ranks"] = None  # several GPUs: analysis.ranks fills it (schema.one_trace)
    return Analysis(out, tables, tables.pop(GAP_CAUSES, None))


GAP_CAUSES = "_gap_causes"  # the idle section's hand-over of Analysis.gap_causes (never a table)


def _overlapping(df: pd.DataFrame, window: tuple[int, int]) -> pd.DataFrame:
    """The rows of a timed table that overlap the window."""
    keep = (df["end_ns"].to_numpy() > window[0]) & (df["start_ns"].to_numpy() < window[1])
    return df if keep.all() else df[keep].reset_index(drop=True)


def _digest_inside(trace: Trace, window: tuple[int, int]) -> KernelDigest:
    """The kernel digest of the kernels (and graph launches traced whole) that overlap a user's window."""
    return digest_of(_overlapping(trace.device.kernels, window), _overlapping(trace.device.graph_runs, window))


def _device_section(trace, digest: KernelDigest, ops, window, opts, out, tables):
    """The GPU section (_gpu_section) and the kernel time at the copies (None where the window cuts an operation),
    with the integrity
    checks started beside them: their timeline is made first, from the GPU rows' times, which the device pass may
    then write the busy union over (gpu.Spare)."""
    trace.nsys_version  # noqa: B018 - read here once: integrity's thread reads it too
    timeline_made = threading.Event()
    trace.background.submit("integrity", _integrity, trace, [integrity.gpu_rows(trace)], timeline_made)
    span = ops.span()
    # the window cuts no operation (it spans them all unless the user gave a narrower one): the device pass's kernel
    # time at the copies serves their overlap, and only then may it write over the kernel times
    whole = span is None or window is None or (window[0] <= span[0] and span[1] <= window[1])
    spare = gpu.Spare(*digest.spare_times, timeline_made.wait) if digest.spare_times and whole else None
    passed = _gpu_section(trace, ops, window, opts, out, tables, spare)
    return passed, passed.kernels_at_copies if passed is not None and whole else None


def _read_beside_gpu(trace: Trace) -> None:
    """Start every read but the kernels': SQLite scans without the GIL, so they load on background threads while
    this one reads the kernels (the copies and memsets first: the device pass needs them next)."""
    trace.background.load("host.nvtx", "calls.api_rows", "calls.sync_calls", "host.threads")  # nvtx first: the GPU section waits for it soonest
    trace.background.submit("waits", os_calls.wait_calls, trace, also=("osrt.zones",))
    trace.background.load("device.memcpys", "device.memsets")


def _read_beside_idle(trace: Trace, gaps: pd.DataFrame, tids: dict, top: int) -> None:
    """Start the longest reads as soon as the gaps and launchers are known, beside everything that follows: the
    launching processes' OS calls near the gaps and the launch calls' cost."""
    trace.background.submit("gap_calls", os_calls.read, trace, gaps, gaps.nlargest(top, "duration_ns"),
                        {pid_of(t) for t in tids["by_gap"].values()})
    trace.background.submit("launch_stats", trace.calls.launch_stats, tids["all"])


def _kernels_section(trace: Trace, digest: KernelDigest, top: int) -> tuple[dict, pd.DataFrame]:
    """Kernel count (graph launches traced whole apart), time, median, the CUDA graphs and the top kernels by time;
    the top kernels' table."""
    tk = digest.top(top)
    full = trace.device.full_kernel_names([str(n) for n in tk["name"]]) if len(tk) else {}
    tk["shown_name"] = [kernel_names.shown(str(n), full.get(str(n))) for n in tk["name"]]
    tk["precision"] = [kernel_names.precision(full.get(str(n), str(n))) for n in tk["name"]]
    tk["library"] = [kernel_names.library(full.get(str(n), str(n))) for n in tk["name"]]
    return {"count": digest.count - digest.graph_runs, "total_ns": digest.total_ns, "median_ns": digest.median_ns,
            "graphs": _graphs(trace, digest), "top": json_rows(tk)}, tk


def _graphs(trace: Trace, digest: KernelDigest) -> dict | None:
    """How much GPU work ran inside CUDA graphs and how it was traced: 'graph' (one row a launch, nsys's default:
    the kernels inside are not in the trace) or 'node' (the kernels themselves); None without graphs."""
    if digest.graph_runs:
        names = digest.by_name["name"].astype(str)
        gpu_ns = int(digest.by_name.loc[names.str.match(r"^CUDA graph( \d+)?$").to_numpy(), "total_ns"].sum())
        launches, traced, inside = digest.graph_runs, "graph", None
    else:
        inside, gpu_ns, launches = trace.device.graph_kernels()
        traced = "node"
        if not inside:
            return None
    return {"traced_as": traced, "launches": int(launches), "gpu_ns": gpu_ns, "kernels_inside": inside,
            "share_of_kernel_time": round(gpu_ns / digest.total_ns, 4) if digest.total_ns else None}


def _step_regex(nvtx: pd.DataFrame, opts: Options) -> tuple[str | None, str]:
    if opts.step_regex:
        return opts.step_regex, "given"
    # from every thread's ranges: the launching thread is known only after a scan of the runtime table, which the
    # window (widened to the steps) cannot wait for
    found = cpu.detect_step_regex(nvtx)
    return (found, "detected") if found else (None, "none found")


def _window(ops: gpu.GpuOps, nvtx: pd.DataFrame, step_regex: str | None, user) -> tuple[int, int] | None:
    """First to last GPU operation, widened to the step ranges: the GPU idles while the last step's CPU work runs."""
    window = gpu.analysis_window(ops, user)
    if window is None or user or not step_regex or nvtx.empty:
        return window
    st = nvtx[nvtx["name"].astype(str).str.contains(step_regex, regex=True)]
    if st.empty:
        return window
    return min(window[0], int(st["start_ns"].min())), max(window[1], int(st["end_ns"].max()))


def _gpu_section(trace, ops, window, opts, out, tables, spare):
    """Utilisation per device and the idle gaps; None when the trace has no GPU activity."""
    if window is None:
        trace.background.wait("host.nvtx")
        spans = [(int(trace.host.nvtx["start_ns"].min()), int(trace.host.nvtx["end_ns"].max()))] if len(trace.host.nvtx) else []
        spans += [s for s in [trace.osrt.span()] if s]
        out["window"] = ({"start_ns": min(s[0] for s in spans), "end_ns": max(s[1] for s in spans),
                          "source": "cpu (no GPU activity)"} if spans else {"source": "empty trace"})
        out["gpu"] = None
        return None
    lo, hi = window
    asked = opts.window_asked
    out["window"] = {"start_ns": lo, "end_ns": hi, "duration_ns": hi - lo,
                     "source": (f"user: {asked.flag} {asked.text}" if asked else "user") if opts.window else
                     "first to last GPU operation or step range", "capture_start_ns": out["window"]["capture_start_ns"]}
    passed = gpu.device_pass(ops.inside(lo, hi), window, opts.min_gap_ns, spare)
    util = passed.util
    names = dict(zip(trace.device.gpus["device"], trace.device.gpus["name"])) if len(trace.device.gpus) else {}
    util["name"] = util["device"].map(names)
    tables["utilization"] = util
    out["gpu"] = {"utilization": float(util["utilization"].mean()),
                  "compute_utilization": float(util["compute_utilization"].mean()),
                  "busy_ns": int(util["busy_ns"].sum()), "compute_ns": int(util["compute_ns"].sum()),
                  "devices": json_rows(util)}
    if not trace.has(KERNEL_TABLE) and not len(trace.device.graph_runs):  # no kernels recorded: nothing gives compute
        out["gpu"].update(compute_utilization=None, compute_ns=None)
        for d in out["gpu"]["devices"]:
            d.update(compute_utilization=None, compute_ns=None)
    return passed


def _copies_section(trace, memcpys, kernels, compute_stream, kernel_time, window, opts, out, tables) -> pd.DataFrame:
    copies = cp.copy_table(memcpys, trace.calls.memcpy_api, kernels, kernel_time) if len(memcpys) else memcpys.assign(
        sync=pd.Series(dtype="boolean"), overlap_ns=pd.Series(dtype="int64"), overlapped=pd.Series(dtype=bool),
        api_name=pd.Series(dtype=object), tid=pd.Series(dtype="int64"), blocking=pd.Series(dtype="boolean"),
        api_start_ns=pd.Series(dtype="int64"), api_end_ns=pd.Series(dtype="int64"),
        api_global_tid=pd.Series(dtype="int64"))
    tables["memcpy"] = copies
    out["memcpy"] = {"dtoh": cp.copy_summary(copies, "DtoH"), "htod": cp.copy_summary(copies, "HtoD"),
                     "dtod": cp.copy_summary(copies, "DtoD"), "overlap_fraction": cp.overlap_fraction(copies),
                     "dtoh_on_compute_stream": cp.copies_on_compute_stream(copies, compute_stream),
                     "compute_stream": compute_stream, "unified": unified.summary(copies, window)}
    if not trace.has(KERNEL_TABLE) and not len(trace.device.graph_runs):  # overlap with kernels nobody recorded: unknown
        for key in ("dtoh", "htod", "dtod"):
            out["memcpy"][key]["overlap_fraction"] = None
        out["memcpy"]["overlap_fraction"] = None
    if window is not None:
        timed = copies[copies["duration_ns"].to_numpy() > 0] if len(copies) else copies  # a rate needs a time
        host = cp.host_bandwidth(timed, window, "DtoH", opts.bin_ns)
        tables["dtoh_host_timeline"] = host
        out["memcpy"]["dtoh_host"] = {
            "bin_ns": int(host["bin_ns"].iloc[0]) if len(host) else opts.bin_ns,
            "peak_gbps": float(host["gbps"].max()) if len(host) else None,
            "mean_gbps": float(gbps(host["bytes"].sum(), window[1] - window[0])) if len(host) else None,
            "devices": sorted(int(x) for x in copies.loc[copies["copy_kind"] == "DtoH", "device"].unique())}
    return copies


def _steps_section(digest, nvtx, copies, passed, window, step_regex, step_source, out, tables):
    busy = passed.busy if passed is not None else None
    if not step_regex:
        step_table = pd.DataFrame(columns=["name", "start_ns", "end_ns", "duration_ns"])
    elif busy is not None and len(out["gpu"]["devices"]) > 1:  # several ranks: each step against its own GPU
        owners = digest.driving_process()
        busy_of = {int(p): passed.busy_by_device[int(d)] for d, p in owners.itertuples(index=False, name=None)
                   if int(d) in passed.busy_by_device}
        step_table = cpu.steps(nvtx, step_regex, busy_of, copies)
    else:
        step_table = cpu.steps(nvtx, step_regex, busy, copies)
    if window is not None and len(step_table):  # the window is the window: only the steps that start inside it
        start = step_table["start_ns"].to_numpy()
        step_table = step_table[(start >= window[0]) & (start < window[1])].reset_index(drop=True)
    tables["steps"] = step_table
    n_steps = len(step_table)
    idle_per_step = float(step_table["gpu_idle_ns"].mean()) if n_steps and "gpu_idle_ns" in step_table else None
    out["steps"] = {"regex": step_regex, "source": step_source, "count": n_steps,
                    "per_second": cpu.steps_per_second(step_table, window[1] if window else None),
                    "mean_ns": float(step_table["duration_ns"].mean()) if n_steps else None,
                    "mean_gpu_idle_ns": idle_per_step}


def _launchers(trace, passed, gaps: pd.DataFrame) -> dict:
    """The launching threads (_launch_threads), from the runtime calls behind the largest gaps' next operations."""
    launch = trace.calls.launch_threads(gaps.nlargest(900, "duration_ns")["next_correlation_id"]) if len(gaps) else None
    return _launch_threads(passed, launch, lambda: trace.calls.api_by_thread)


def _launch_threads(passed, launch, launches_by_thread) -> dict:
    """{(pid, correlation id): launching thread} of the gaps' next operations, and the launching threads per device:
    those of the gaps, else the thread that issued the most kernel launches."""
    by_pid = passed is not None and len(passed.gaps) > 0 and bool((passed.gaps["next_pid"] >= 0).any())
    tid_of = ({(int(p) if by_pid else -1, int(c)): t for p, c, t in
               zip(launch["pid"], launch["correlation_id"], launch["global_tid"])}
              if launch is not None and len(launch) else {})
    per_device: dict[int, set] = {}
    if passed is not None and len(passed.gaps):
        g = passed.gaps
        for dev, p, c in zip(g["device"], g["next_pid"], g["next_correlation_id"]):
            t = tid_of.get((int(p) if by_pid else -1, int(c)))
            if t is not None:
                per_device.setdefault(int(dev), set()).add(int(t))
    devices = [int(d) for d in passed.util["device"]] if passed is not None else []
    # the thread with the most launches, for devices whose gaps name none (a grouped runtime scan: only then)
    needed = not tid_of or any(not per_device.get(d) for d in devices)
    fallback = _busiest_launcher(launches_by_thread()) if needed else set()
    return {"by_gap": tid_of, "by_pid": by_pid, "devices": {int(d): per_device.get(int(d)) or fallback for d in devices},
            "all": set(tid_of.values()) or fallback}


def _busiest_launcher(api_by_thread: pd.DataFrame) -> set:
    """The thread that issued the most kernel launches (empty without CUDA API rows)."""
    if api_by_thread.empty:
        return set()
    busiest = api_by_thread.groupby("global_tid")["count"].sum().sort_values(ascending=False)
    return {int(busiest.index[0])} if len(busiest) else set()


def _gaps_section(gap_table: pd.DataFrame, tids, calls: os_calls.GapCalls, nvtx, step_regex, opts, out, tables):
    tables["gaps"] = gap_table
    tid_of, by_pid, launch_tids = tids["by_gap"], tids["by_pid"], set(tids["by_gap"].values())
    near_top = calls.near_top
    per_thread = {tid: near_top[near_top["global_tid"].to_numpy() == tid] for tid in launch_tids}
    top = []
    for g in gap_table.nlargest(opts.top, "duration_ns").to_dict("records"):
        tid = tid_of.get((int(g["next_pid"]) if by_pid else -1, int(g["next_correlation_id"])))
        ctx = cpu.gap_context(g, nvtx, per_thread.get(tid, near_top.iloc[0:0]), tid)
        top.append({"device": int(g["device"]), "start_ns": int(g["start_ns"]), "duration_ns": int(g["duration_ns"]),
                    "launch_tid": int(tid) & 0xFFFFFF if tid is not None else None, **ctx})
    covered = cpu.gap_cover_by_range(gap_table, nvtx, launch_tids, step_regex)
    tables["gap_ranges"], tables["gap_osrt"] = covered, calls.in_gaps
    total_gap = int(gap_table["duration_ns"].sum()) if len(gap_table) else 0
    out["gaps"] = {"threshold_ns": opts.min_gap_ns, "count": int(len(gap_table)), "total_ns": total_gap,
                   "per_step_ns": out["steps"]["mean_gpu_idle_ns"], "top": top,
                   "covered_by": json_rows(covered.head(opts.top)), "osrt": json_rows(calls.in_gaps.head(opts.top))}


def _idle_section(trace, passed, window, tids, osrt, nvtx, copies, step_regex, opts, out, tables):
    """Every idle nanosecond of each device given to one cause (analysis/sections/idle.py)."""
    if passed is None:
        out["idle"] = None
        return
    trace.background.wait("calls.sync_calls")
    syncs, cuda_calls = _host_waits(trace.calls.sync_calls, copies)
    loaders = {dev: program.loader_threads(trace.host.threads, {pid_of(x) for x in tids["devices"].get(dev, set())})
               for dev in passed.busy_by_device}

    def attributed(span: tuple[int, int]) -> tuple[pd.DataFrame, dict]:
        """Every device's idle time in the span by cause (idle.attribute), and each device's details."""
        parts, details = [], {}
        for dev, busy in passed.busy_by_device.items():
            t, details[str(dev)] = idle.attribute(busy, span, tids["devices"].get(dev, set()), osrt, nvtx, syncs,
                                                  cuda_calls, step_regex, opts.min_gap_ns, dev, loaders[dev])
            parts.append(t)
        return (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=idle.COLUMNS)), details
    table, details = attributed(window)
    tables["idle"] = table
    tables[GAP_CAUSES] = lambda dev, spans: idle.gap_causes(spans, tids["devices"].get(dev, set()), osrt, nvtx, syncs,
                                                            cuda_calls, step_regex, opts.min_gap_ns, loaders.get(dev))
    mine_syncs = syncs[syncs["global_tid"].isin(list(tids["all"]))] if len(syncs) else syncs
    launch_calls, launch_ns = trace.background.result("launch_stats")
    out["idle"] = {"causes": json_rows(table), "devices": details,
                   "launch_threads": sorted(int(t) & 0xFFFFFF for t in tids["all"]),
                   "launch_calls": launch_calls, "launch_api_ns": launch_ns,
                   "sync_calls": int(len(mine_syncs)),
                   "sync_blocked_ns": int(mine_syncs["duration_ns"].sum()) if len(mine_syncs) else 0}
    span = _steady_span(tables.get("steps"), window)
    out["steps"]["setup"] = None
    if span is not None:  # the set-up before the first step (model load, warm-up) is not what each step costs
        tables["idle_steps"] = attributed(span)[0]
        inside = (mine_syncs["start_ns"] >= span[0]).to_numpy() & (mine_syncs["start_ns"] < span[1]).to_numpy() \
            if len(mine_syncs) else np.zeros(0, bool)
        out["steps"]["setup"] = _setup(window, span, table, tables["idle_steps"], len(mine_syncs), int(inside.sum()))
        mine_syncs = mine_syncs[inside]
    tables["sync_names"] = mine_syncs["name"].astype(str).value_counts() if len(mine_syncs) else pd.Series(dtype="int64")


SETUP_SHARE = 0.10  # set-up (before the first step, after the last) above this share of the window is reported apart


def _steady_span(steps: pd.DataFrame | None, window) -> tuple[int, int] | None:
    """From the first step's start to the window's end, where the set-up before the first step is at least
    SETUP_SHARE of the window; None otherwise (no steps, or too little set-up to matter). The time after the last
    step stays: in a pipelined program the GPU is still running the steps' work there."""
    if steps is None or len(steps) < 2 or window is None:
        return None
    lo = int(steps["start_ns"].min())
    return (lo, window[1]) if lo - window[0] >= SETUP_SHARE * (window[1] - window[0]) else None


def _setup(window, span, whole: pd.DataFrame, steady: pd.DataFrame, syncs: int, syncs_inside: int) -> dict:
    """What happened before the first step: its time, the GPU idle time in it by cause, the synchronising calls made."""
    by_cause = (whole.groupby("cause")["idle_ns"].sum() - steady.groupby("cause")["idle_ns"].sum()).fillna(
        whole.groupby("cause")["idle_ns"].sum()).clip(lower=0)
    return {"steps_start_ns": span[0], "before_first_step_ns": span[0] - window[0],
            "idle_ns": {str(k): int(v) for k, v in by_cause.items() if v > 0},
            "sync_calls": syncs - syncs_inside, "sync_calls_in_steps": syncs_inside}


def _host_waits(sync_api: pd.DataFrame, copies: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Synchronising calls (explicit syncs and small blocking copies: `.item()`, `.cpu()` of a scalar) and every
    CUDA call that can hold the thread (those plus all copy calls). Big copies have their own rules."""
    cols = ["start_ns", "end_ns", "duration_ns", "global_tid", "name"]
    c = copies.dropna(subset=["api_start_ns"]) if len(copies) else copies
    if len(c):
        c = c.assign(start_ns=c["api_start_ns"].astype("int64"), end_ns=c["api_end_ns"].astype("int64"),
                     global_tid=c["api_global_tid"].astype("int64"), name=c["api_name"].astype(str))
        c = c.assign(duration_ns=c["end_ns"] - c["start_ns"])
        big = pd.concat([cp.big_copies(copies, k) for k in ("DtoH", "HtoD")]).index
        small_blocking = c[(c["blocking"] == True) & ~c.index.isin(big)]  # noqa: E712
    else:
        small_blocking = pd.DataFrame(columns=cols)
    syncs = pd.concat([sync_api[cols], small_blocking[cols] if len(small_blocking) else small_blocking],
                      ignore_index=True) if len(sync_api) or len(small_blocking) else pd.DataFrame(columns=cols)
    all_calls = pd.concat([syncs, c[cols]], ignore_index=True) if len(c) else syncs
    return syncs, all_calls


def summarize(trace: Trace, **kw) -> dict:
    """The summary of analyze() with Options(**kw)."""
    return analyze(trace, Options(**kw)).summary


def _trace_section(trace: Trace, digest: KernelDigest, memcpys, nvtx, copies, gpu_section, opts: Options) -> dict:
    """What the trace is: its counts, host link and program, and for a capture without GPU work (a CPU-only program,
    a machine without a GPU) what its OS calls took instead."""
    info = _trace_info(trace, digest.count, memcpys, nvtx)
    info["os_runtime"] = _os_runtime(trace, opts.top) if gpu_section is None else None
    info["link"] = host_link(trace.device.gpus, copies, opts.link_gbps)
    info["program"] = program.describe(trace.host.threads, nvtx, digest.names(), opts.run_record)
    return info


def _os_runtime(trace: Trace, top: int) -> list[dict]:
    """The OS runtime calls by total time (name, count, total_ns), the top few; empty without the table."""
    if not trace.has("OSRT_API"):
        return []
    return json_rows(trace.query(sql.OSRT_BY_NAME.format(top=int(top))))


def _trace_info(trace: Trace, n_kernels: int, memcpys, nvtx) -> dict:
    return {"path": trace.source, "nsys_version": trace.nsys_version,
            "gpus": json_rows(trace.device.gpus) if len(trace.device.gpus) else [],
            "counts": {"kernels": n_kernels, "memcpys": int(len(memcpys)), "nvtx_ranges": int(len(nvtx)),
                       "osrt_calls": None},  # set last: analyze() counts them after the scoped reads
            "integrity": None}  # analyze() sets it once the background assessment is done


def _integrity(trace: Trace, rows: list[dict], timeline_made: threading.Event) -> dict:
    """integrity_rules.assess() on a background thread, once the NVTX ranges and call counts it reads are loaded. rows: a
    list holding integrity.gpu_rows(), taken out of it so that nothing reads the GPU rows' times once the timeline
    is made (timeline_made is set then, or on an error)."""
    try:
        trace.background.wait("host.nvtx")
        side = integrity.gpu_side(trace, rows.pop())
    finally:
        timeline_made.set()
    return integrity_rules.assess(trace, side=side, counts=trace.background.result("call_counts"))
