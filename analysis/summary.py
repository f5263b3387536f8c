"""All analyses of one trace, as tables (DataFrames) and as the documented JSON (docs/json-schema.md)."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import pandas as pd

from nsys_transfer.nsys_core.contracts import PIPELINE_CLOSE, PIPELINE_DRAIN

from nsys_transfer.analysis.sections import copies as cp
from nsys_transfer.analysis.sections import cpu, cpu_only, cpu_work, gpu, idle_summary, integrity, launchers, os_calls, program, setup, steady
from nsys_transfer.analysis.sections import kernels as kernel_section
from nsys_transfer.analysis.load import sql
from nsys_transfer.analysis.load.span import FIRST_EVENT, SESSION_START, capture_start, gpu_span_estimate
from nsys_transfer.analysis.rules import integrity as integrity_rules
from nsys_transfer.analysis.rules.base import Context
from nsys_transfer.analysis.rules.diagnosis import diagnose
from nsys_transfer.analysis.load.kernel_digest import KernelDigest
from nsys_transfer.analysis.sections.machine import host_link
from nsys_transfer.analysis.schema import SCHEMA, Part, json_rows
from nsys_transfer.analysis.load.device import KERNEL_TABLE, digest_of
from nsys_transfer.analysis.load.frames import pid_of
from nsys_transfer.analysis.load.trace import Trace
from nsys_transfer.analysis.window_spec import Spec


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
    whole: bool = False                 # the whole capture, set-up and warm-up included (default: the steady state)
    window_asked: Spec | None = None    # how the user gave `window` (--window or --steps), for its `source`


@dataclass
class Analysis:
    """The computed tables and the JSON summary of one trace; gap_causes(device, spans) -> (cause, subject) of each
    idle span by the idle attribution's rules (for charts; None without an idle section)."""
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None


def analyze(trace: Trace, opts: Options | None = None, progress=None) -> Analysis:
    """Analyse one trace: the summary (JSON-able) and the tables behind it. Each section's part comes from its module
    in sections/; this function orders the reads (load/background.py) so that the long ones run beside the rest."""
    opts = opts or Options()
    say = progress or (lambda msg: None)
    waits = _read_beside_gpu(trace)
    trace.background.wait("host.nvtx")
    nvtx = trace.host.nvtx
    step_regex, step_source = _step_regex(nvtx, opts)
    step_rows = _step_rows(nvtx, step_regex)
    # the verdict is about the steady state: past the set-up and warm-up, unless the user asked for a window
    found = None if opts.window is not None or opts.whole else _steady(trace, step_rows)
    say("loading GPU activity")
    # a window the user gave is the window: the kernels, copies and ranges counted are the ones inside it
    digest, memcpys = _gpu_rows(trace, opts.window or ((found.start_ns, OPEN_END) if found else None))
    kernels = digest.ops
    # a scan on the core the device pass leaves free: the runtime calls per kind
    call_counts = trace.background.submit(integrity.call_counts, trace)
    ops = gpu.gpu_ops(kernels, memcpys, trace.device.memsets)
    window = _window(ops, nvtx, step_rows, opts.window, found.start_ns if found else None)
    # the whole capture's first event, read before the device pass may write over the kernel times (gpu.Spare)
    first_event = capture_start(trace)
    setup_part = setup.part(trace, found, first_event, nvtx, step_regex) if found and window else None
    kernels_recorded = trace.has(KERNEL_TABLE) or bool(len(trace.device.graph_runs))

    say("computing utilisation and gaps")
    passed, kernel_time, checked = _device_pass(trace, digest, ops, window, opts.min_gap_ns, call_counts)
    del ops
    passed = gpu.spilled(passed) if passed is not None else None  # a long capture's busy union: read back in slices
    if passed is None or len(passed.busy_by_device) <= 1:  # several GPUs: analysis.ranks reads the kernels next
        trace.forget("device.kernel_digest", "device.kernels", "device.memsets")  # millions of rows: memory for the rest
    digest = digest.without_ops()
    out: dict = {"window": _window_part(trace, window, opts, first_event, found)}
    parts = {"gpu": gpu.part(passed.util, trace.device.gpus, kernels_recorded) if passed else Part(None, {})}
    # the copies' kernel time: from the kernels where the device pass did not give it (it never wrote over them then)
    kernels = kernels if kernel_time is None else None
    gaps = passed.gaps if passed is not None else gpu.idle_gaps(gpu.GpuOps({}), (0, 1), 1)
    launching = trace.background.submit(_launchers, trace, passed, gaps)  # a runtime scan, beside the copies
    say("joining copies to their API calls")
    parts["memcpy"] = cp.part(memcpys, lambda: trace.calls.memcpy_api, kernels, kernel_time, digest.compute_stream(),
                              window, opts.bin_ns, kernels_recorded)
    copies = parts["memcpy"].tables["memcpy"]
    trace.forget("calls.api_rows", "calls.memcpy_api")  # in the copy table now (a long capture's millions of calls)
    tids = launching.result()
    gap_calls, launch_stats = _read_beside_idle(trace, gaps, tids, opts.top)
    trace.background.wait("host.threads")
    trace_info = _trace_section(trace, digest, memcpys, nvtx, copies, parts["gpu"].summary, opts)
    parts["steps"] = cpu.steps_part(digest, nvtx, copies, passed, window, step_regex, step_source,
                                    len(parts["gpu"].summary["devices"]) if passed else 0)
    parts["kernels"] = kernel_section.part(digest, opts.top, trace.device.full_kernel_names,
                                           trace.device.graph_kernels)
    say("attributing idle time")
    samples = _samples(trace, passed, tids, setup_part)
    idle_part = _idle_part(trace, passed, window, tids, waits.result(), nvtx, copies, samples,
                           parts["steps"].tables["steps"],
                           step_regex, opts, launch_stats.result)
    if idle_part is not None:
        parts["steps"].summary["setup"] = idle_part.setup
    say("finding what the CPU did during gaps")
    parts["gaps"] = cpu.gaps_part(gaps, tids, gap_calls.result(), nvtx, step_regex, opts.top,
                                  opts.min_gap_ns, parts["steps"].summary["mean_gpu_idle_ns"])
    parts["idle"] = Part(idle_part.summary, idle_part.tables) if idle_part else Part(None, {})
    trace_info["integrity"] = checked.result()
    parts["setup"] = Part(setup_part, {})
    return _assembled(trace, opts, window if (opts.window or found) else None, out["window"], trace_info, parts,
                      nvtx, idle_part, say)


def _assembled(trace: Trace, opts: Options, narrowed, window: dict, trace_info: dict, parts: dict, nvtx, idle_part,
               say) -> Analysis:
    """The summary in the JSON's order with its diagnosis, from every section's part (narrowed: the window where it
    is not the whole capture's)."""
    shown = nvtx if narrowed is None else _overlapping(nvtx, narrowed)
    ns = cpu.nvtx_summary(shown)
    parts["nvtx"] = Part({"count": int(len(shown)), "ranges": json_rows(ns.head(max(opts.top, 20)))},
                         {"nvtx_summary": ns})
    out = {"schema": SCHEMA, "trace": trace_info, "window": window, **{k: parts[k].summary for k in SECTION_ORDER}}
    tables = {name: df for k in TABLE_ORDER for name, df in parts[k].tables.items()}
    say("diagnosing")
    out["diagnosis"] = diagnose(Context(out, tables, opts.pipeline_depth))
    trace_info["counts"]["osrt_calls"] = trace.osrt.count()  # after the scoped reads: they say if it is damaged
    out["warnings"] = sorted(set(trace.warnings))  # rows a damaged export made us drop (load.validate)
    out["ranks"] = None  # several GPUs: analysis.ranks fills it (schema.one_trace)
    return Analysis(out, tables, idle_part.gap_causes if idle_part else None)


OPEN_END = 2 ** 62  # a window's open end: past any trace timestamp
SECTION_ORDER = ("setup", "gpu", "memcpy", "steps", "gaps", "idle", "kernels", "nvtx")  # the JSON's order (schema.KEYS)
TABLE_ORDER = ("setup", "gpu", "memcpy", "steps", "kernels", "idle", "gaps", "nvtx")  # the order the tables were made in


def _gpu_rows(trace: Trace, narrowed: tuple[int, int] | None):
    """The kernel digest and the copies inside the window (None: the whole capture's)."""
    if narrowed is None:
        digest = trace.device.kernel_digest
    else:  # the steady state's open end reads in the bounded pass; a user's window, from the kernel table
        digest = (trace.device.kernel_digest_from(narrowed[0]) if narrowed[1] == OPEN_END else
                  _digest_inside(trace, narrowed))
    trace.background.wait("device.memcpys", "device.memsets")
    memcpys = trace.device.memcpys
    return digest, (memcpys if narrowed is None else _overlapping(memcpys, narrowed))


def _overlapping(df: pd.DataFrame, window: tuple[int, int]) -> pd.DataFrame:
    """The rows of a timed table that overlap the window."""
    keep = (df["end_ns"].to_numpy() > window[0]) & (df["start_ns"].to_numpy() < window[1])
    return df if keep.all() else df[keep].reset_index(drop=True)


def _digest_inside(trace: Trace, window: tuple[int, int]) -> KernelDigest:
    """The kernel digest of the kernels (and graph launches traced whole) that overlap a user's window."""
    return digest_of(_overlapping(trace.device.kernels, window), _overlapping(trace.device.graph_runs, window))


def _device_pass(trace, digest: KernelDigest, ops, window, min_gap_ns: int, call_counts: Future):
    """The device pass (sections/gpu.py) over the window, and the kernel time at the copies (None where the window
    cuts an operation), and the integrity verdict in the making (a Future); (None, None, verdict) without GPU
    activity. The integrity checks start beside it: their timeline is made first, from the GPU rows' times, which the
    device pass may then write the busy union over (gpu.Spare)."""
    _ = trace.nsys_version  # read here once: integrity's thread reads it too
    timeline_made = threading.Event()
    checked = trace.background.submit(_integrity, trace, [integrity.gpu_rows(trace)], timeline_made, call_counts)
    if window is None:
        return None, None, checked
    span = ops.span()
    # the window cuts no operation (it spans them all unless the user gave a narrower one): the device pass's kernel
    # time at the copies serves their overlap, and only then may it write over the kernel times
    whole = span is None or (window[0] <= span[0] and span[1] <= window[1])
    spare = gpu.Spare(*digest.spare_times, timeline_made.wait) if digest.spare_times and whole else None
    passed = gpu.device_pass(ops.inside(*window), window, min_gap_ns, spare)
    return passed, passed.kernels_at_copies if whole else None, checked


def _read_beside_gpu(trace: Trace) -> Future:
    """Start every read but the kernels': SQLite scans without the GIL, so they load on background threads while
    this one reads the kernels (the copies and memsets first: the device pass needs them next). The OS calls the
    threads waited in (with the zones of the OS runtime table) come back as a Future."""
    trace.background.load("host.nvtx", "calls.api_rows", "calls.sync_calls", "host.threads")  # nvtx first: the GPU section waits for it soonest
    # the waiting OS calls (tens of millions in a long capture): into temporary files as they are read
    waits = trace.background.submit(os_calls.spilled_wait_calls, trace, also=("osrt.zones",))
    trace.background.load("device.memcpys", "device.memsets")
    return waits


def _read_beside_idle(trace: Trace, gaps: pd.DataFrame, tids: dict, top: int) -> tuple[Future, Future]:
    """Start the longest reads as soon as the gaps and launchers are known, beside everything that follows: the
    launching processes' OS calls near the gaps and the launch calls' cost."""
    return (trace.background.submit(os_calls.read, trace, gaps, gaps.nlargest(top, "duration_ns"),
                                    {pid_of(t) for t in tids["by_gap"].values()}),
            trace.background.submit(trace.calls.launch_stats, tids["all"]))


def _step_regex(nvtx: pd.DataFrame, opts: Options) -> tuple[str | None, str]:
    if opts.step_regex:
        return opts.step_regex, "given"
    # from every thread's ranges: the launching thread is known only after a scan of the runtime table, which the
    # window (widened to the steps) cannot wait for
    found = cpu.detect_step_regex(nvtx)
    return (found, "detected") if found else (None, "none found")


def _step_rows(nvtx: pd.DataFrame, step_regex: str | None) -> pd.DataFrame:
    """The step ranges (every column of nvtx) matched by step_regex; none without one."""
    return nvtx[program.matching(nvtx["name"], step_regex)] if step_regex and len(nvtx) else nvtx.iloc[0:0]


def _window(ops: gpu.GpuOps, nvtx: pd.DataFrame, st: pd.DataFrame, user, steady_start: int | None = None
            ) -> tuple[int, int] | None:
    """First to last GPU operation, widened to the step ranges: the GPU idles while the last step's CPU work runs;
    from the steady state's start where it has one."""
    window = gpu.analysis_window(ops, user)
    if window is None or user:
        return window
    lo, hi = window if st.empty else (min(window[0], int(st["start_ns"].min())), max(window[1], int(st["end_ns"].max())))
    # the output pipeline's last drain: its workers' post-processing of the last outputs, after the GPU's last work
    drains = _drains(nvtx)
    drains = drains[drains["start_ns"].to_numpy() < hi]
    hi = max(hi, int(drains["end_ns"].max())) if len(drains) else hi
    return (steady_start, hi) if steady_start is not None and steady_start < hi else (lo, hi)


def _steady(trace: Trace, st: pd.DataFrame) -> steady.Steady | None:
    """Where the program's steady state starts (sections/steady.py): from its steps, or its kernel stream."""
    st = st[["start_ns", "end_ns"]].sort_values("start_ns", ignore_index=True)
    trace.background.wait("device.memcpys")  # their span is part of the capture's
    return steady.choose(st, lambda: trace.device.kernel_sequence(steady.SEQUENCE_LIMIT), gpu_span_estimate(trace),
                         _drains(trace.host.nvtx)["end_ns"].to_numpy())


def _drains(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The output pipeline's drains (fixes.OutputPipeline waiting for its workers): the start and end of each."""
    return nvtx.loc[(nvtx["name"] == PIPELINE_DRAIN).to_numpy(), ["start_ns", "end_ns"]] if len(nvtx) else \
        pd.DataFrame({"start_ns": [], "end_ns": []}, dtype="int64")


def _window_part(trace: Trace, window, opts: Options, first_event: int | None, found) -> dict:
    """The `window` section: the span analysed and where it came from; without GPU activity, the span of the CPU's
    own events (NVTX ranges, OS runtime calls)."""
    if window is None:
        trace.background.wait("host.nvtx")
        nvtx = trace.host.nvtx
        spans = [(int(nvtx["start_ns"].min()), int(nvtx["end_ns"].max()))] if len(nvtx) else []
        spans += [s for s in [trace.osrt.span()] if s]
        return ({"start_ns": min(s[0] for s in spans), "end_ns": max(s[1] for s in spans),
                 "source": "cpu (no GPU activity)"} if spans else {"source": "empty trace"})
    lo, hi = window
    asked = opts.window_asked
    origin_ns, origin_name = (0, SESSION_START) if trace.session_start_utc_ns is not None else (first_event, FIRST_EVENT)
    out = {"start_ns": lo, "end_ns": hi, "duration_ns": hi - lo,
           "source": (f"user: {asked.flag} {asked.text}" if asked else "user") if opts.window else
           setup.window_source(found) if found else "first to last GPU operation or step range",
           "capture_start_ns": first_event, "origin_ns": origin_ns, "origin": origin_name}
    teardown = None if opts.window else _teardown_ns(trace.host.nvtx, hi)
    return {**out, "teardown_ns": teardown} if teardown else out


def _teardown_ns(nvtx: pd.DataFrame, end_ns: int) -> int | None:
    """How long the output pipeline's close ran past the window's end (its last drain ends the window; the workers'
    join and the buffers' unpinning and unmapping follow, on the user's clock); None without a close there."""
    if not len(nvtx):
        return None
    close = nvtx.loc[(nvtx["name"] == PIPELINE_CLOSE).to_numpy(), ["start_ns", "end_ns"]]
    close = close[(close["start_ns"].to_numpy() < end_ns) & (close["end_ns"].to_numpy() > end_ns)]
    return int(close["end_ns"].max()) - end_ns if len(close) else None


def _launchers(trace, passed, gaps: pd.DataFrame) -> dict:
    """The launching threads (sections/launchers.py), from the runtime calls behind the largest gaps' next operations."""
    launch = trace.calls.launch_threads(gaps.nlargest(900, "duration_ns")["next_correlation_id"]) if len(gaps) else None
    return launchers.launch_threads(passed, launch, lambda: trace.calls.api_by_thread)


def _samples(trace: Trace, passed, tids: dict, setup_part: dict | None) -> pd.DataFrame | None:
    """The launching threads' CPU samples by owner (sections/cpu_work.py), and the set-up's share of them."""
    if passed is None:
        return None
    samples = cpu_work.owners(trace.host.samples(tids["all"]))
    if setup_part is not None:
        setup_part["cpu_samples"] = setup.sampled(setup_part, samples)
    return samples


def _idle_part(trace: Trace, passed, window, tids, waits, nvtx, copies, samples, steps, step_regex, opts: Options,
               launch_stats):
    """The idle section (sections/idle_summary.py); None without GPU activity."""
    if passed is None:
        return None
    trace.background.wait("calls.sync_calls")
    inputs = idle_summary.Inputs(tids, waits, nvtx, copies, trace.calls.sync_calls, trace.host.threads, samples)
    return idle_summary.part(passed, window, inputs, steps, step_regex, opts.min_gap_ns,
                             launch_stats)


def summarize(trace: Trace, **kw) -> dict:
    """The summary of analyze() with Options(**kw)."""
    return analyze(trace, Options(**kw)).summary


def _trace_section(trace: Trace, digest: KernelDigest, memcpys, nvtx, copies, gpu_section, opts: Options) -> dict:
    """What the trace is: its counts, host link and program, and for a capture without GPU work (a CPU-only program,
    a machine without a GPU) what its OS calls took instead."""
    info = _trace_info(trace, digest.count, memcpys, nvtx)
    info["os_runtime"] = _os_runtime(trace, opts.top) if gpu_section is None else None
    info["cpu_only"] = cpu_only.part(trace) if gpu_section is None else None
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


def _integrity(trace: Trace, rows: list[dict], timeline_made: threading.Event, call_counts: Future) -> dict:
    """integrity_rules.verdict() on a background thread, once the NVTX ranges and call counts it reads are loaded. rows: a
    list holding integrity.gpu_rows(), taken out of it so that nothing reads the GPU rows' times once the timeline
    is made (timeline_made is set then, or on an error)."""
    try:
        trace.background.wait("host.nvtx")
        side = integrity.gpu_side(trace, rows.pop())
    finally:
        timeline_made.set()
    return integrity_rules.verdict(integrity.figures(trace, side=side, counts=call_counts.result()))
