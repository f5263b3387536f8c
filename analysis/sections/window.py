"""The `window` section and what the other sections read inside it: the reads that start first, the NVTX ranges and
the step ranges, the steady state (sections/steady.py), the GPU rows inside the window and the window itself; and the
window a user asked for (--window, --steps, parsed by cli/window.py) in trace ns, resolved once by the facade."""
from __future__ import annotations

import math
from concurrent.futures import Future
from typing import NamedTuple

import pandas as pd

from ...nsys_core.contracts import PIPELINE_CLOSE, PIPELINE_DRAIN

from ..common.errors import TraceError
from ..common.spill import Frames
from ..common.window_spec import Spec
from ..load import span
from ..load.device import digest_of
from ..load.kernel_digest import KernelDigest
from ..load.ops_store import SpilledOps
from ..load.span import capture_start, gpu_span_estimate
from ..load.trace import Trace
from ..common.schema import Part, rows_as
from . import cpu, gpu, os_calls, program, setup, steady
from .base import OPTS, SAY, TRACE, Options, Say, declare
from .steady import Steady
from dataclasses import dataclass
from ..common.typed_json import ABSENT, Absent


@dataclass(frozen=True, kw_only=True)
class Window:
    """The `window` object: the span analysed and where it came from (keys absent for a trace without GPU work, or an
    empty one)."""
    start_ns: int | Absent = ABSENT
    end_ns: int | Absent = ABSENT
    duration_ns: int | Absent = ABSENT
    source: str
    capture_start_ns: int | None | Absent = ABSENT
    origin_ns: int | None | Absent = ABSENT
    origin: str | Absent = ABSENT
    teardown_ns: int | Absent = ABSENT


@dataclass(frozen=True, kw_only=True)
class NvtxPart:
    """The `nvtx` section: the NVTX ranges inside the window by name."""
    count: int
    ranges: tuple[NvtxRange, ...]


@dataclass(frozen=True, kw_only=True)
class NvtxRange:
    """One NVTX range name's figures (as `nsys stats --report nvtx_sum`)."""
    name: str
    kind: str
    count: int
    total_ns: int
    mean_ns: float
    med_ns: float
    min_ns: int
    max_ns: int
    std_ns: float | None

OPEN_END = 2 ** 62  # a window's open end: past any trace timestamp


def os_waits(trace: Trace) -> Future[Frames]:
    """Start every read but the kernels': SQLite scans without the GIL, so they load on background threads while
    the main one reads the kernels (the copies and memsets first: the device pass needs them next). The OS calls the
    threads waited in (with the zones of the OS runtime table) come back as a Future."""
    trace.background.load("host.nvtx", "calls.api_rows", "calls.sync_calls", "host.threads")  # nvtx first: the GPU section waits for it soonest
    # the waiting OS calls (tens of millions in a long capture): into temporary files as they are read
    waits = trace.background.submit(os_calls.spilled_wait_calls, trace, also=("osrt.zones",))
    trace.background.load("device.memcpys", "device.memsets")
    return waits


declare(os_waits, needs=(TRACE,), background=True)


def nvtx_rows(trace: Trace) -> pd.DataFrame:
    """Every NVTX range, once their background read is done."""
    trace.background.wait("host.nvtx")
    return trace.host.nvtx


declare(nvtx_rows, needs=(TRACE,), after=(os_waits,))


def step_regex(nvtx_rows: pd.DataFrame, opts: Options) -> str | None:
    """The steps' regex (step_regex_of())."""
    return step_regex_of(nvtx_rows, opts.step_regex)


declare(step_regex, needs=(nvtx_rows, OPTS))


def step_rows(nvtx_rows: pd.DataFrame, step_regex: str | None) -> pd.DataFrame:
    """The step ranges (step_rows_of())."""
    return step_rows_of(nvtx_rows, step_regex)


declare(step_rows, needs=(nvtx_rows, step_regex))


def step_regex_of(nvtx: pd.DataFrame, given: str | None) -> str | None:
    """The steps' regex, the one step detection (the analysis's and --steps'): the given one, else detected from
    every thread's ranges (the launching thread is known only after a scan of the runtime table, which the window,
    widened to the steps, cannot wait for)."""
    return given or cpu.detect_step_regex(nvtx)


def step_rows_of(nvtx: pd.DataFrame, step_regex: str | None) -> pd.DataFrame:
    """The step ranges (every column of the NVTX ranges) matched by step_regex; none without one."""
    return nvtx[program.matching(nvtx["name"], step_regex)] if step_regex and len(nvtx) else nvtx.iloc[0:0]


def step_spans(step_rows: pd.DataFrame) -> pd.DataFrame:
    """The steps' start_ns and end_ns, in start order."""
    return step_rows[["start_ns", "end_ns"]].sort_values("start_ns", ignore_index=True)


def steady_state(trace: Trace, step_rows: pd.DataFrame, opts: Options) -> Steady | None:
    """Where the program's steady state starts (sections/steady.py): from its steps, or its kernel stream. The verdict
    is about the steady state: past the set-up and warm-up, unless the user asked for a window (None then)."""
    if opts.window is not None or opts.whole:
        return None
    st = step_spans(step_rows)
    trace.background.wait("device.memcpys")  # their span is part of the capture's
    return steady.choose(st, lambda: trace.device.kernel_sequence(steady.SEQUENCE_LIMIT), gpu_span_estimate(trace),
                         _drains(trace.host.nvtx)["end_ns"].to_numpy(), steady.warmup_end(trace.host.nvtx))


declare(steady_state, needs=(TRACE, step_rows, OPTS))


class GpuRows(NamedTuple):
    """What gpu_rows() makes: the kernel digest and the copies inside the window."""
    kernel_digest: KernelDigest
    memcpys: pd.DataFrame


def gpu_rows(trace: Trace, steady: Steady | None, opts: Options, say: Say) -> GpuRows:
    """The kernel digest and the copies inside the window (a window the user gave is the window: the kernels, copies
    and ranges counted are the ones inside it), the whole capture's without one."""
    say("loading GPU activity")
    narrowed = opts.window or ((steady.start_ns, OPEN_END) if steady else None)
    if narrowed is None:
        digest = trace.device.kernel_digest
    else:  # the steady state's open end reads in the bounded pass; a user's window, from the kernel table
        digest = (trace.device.kernel_digest_from(narrowed[0]) if narrowed[1] == OPEN_END else
                  _digest_inside(trace, narrowed))
    trace.background.wait("device.memcpys", "device.memsets")
    memcpys = trace.device.memcpys
    return GpuRows(digest, memcpys if narrowed is None else overlapping(memcpys, narrowed))


declare(gpu_rows, needs=(TRACE, steady_state, OPTS, SAY), provides=GpuRows)


def ops(trace: Trace, kernel_digest: KernelDigest, memcpys: pd.DataFrame) -> gpu.GpuOps:
    """Every GPU operation inside the window: the kernels, copies and memsets."""
    return gpu.gpu_ops(kernel_digest.ops, memcpys, trace.device.memsets)


declare(ops, needs=(TRACE, GpuRows.kernel_digest, GpuRows.memcpys))


def window_ns(ops: gpu.GpuOps, nvtx_rows: pd.DataFrame, step_rows: pd.DataFrame, opts: Options,
              steady: Steady | None) -> tuple[int, int] | None:
    """First to last GPU operation, widened to the step ranges: the GPU idles while the last step's CPU work runs;
    from the steady state's start where it has one."""
    window = gpu.analysis_window(ops, opts.window)
    if window is None or opts.window:
        return window
    st, steady_start = step_rows, steady.start_ns if steady else None
    lo, hi = window if st.empty else (min(window[0], int(st["start_ns"].min())), max(window[1], int(st["end_ns"].max())))
    # the output pipeline's last drain: its workers' post-processing of the last outputs, after the GPU's last work
    drains = _drains(nvtx_rows)
    drains = drains[drains["start_ns"].to_numpy() < hi]
    hi = max(hi, int(drains["end_ns"].max())) if len(drains) else hi
    return (steady_start, hi) if steady_start is not None and steady_start < hi else (lo, hi)


declare(window_ns, needs=(ops, nvtx_rows, step_rows, OPTS, steady_state))


def first_event(trace: Trace) -> int | None:
    """The whole capture's first event, read before the device pass may write over the kernel times (gpu.Spare)."""
    return capture_start(trace)


declare(first_event, needs=(TRACE,), after=(window_ns,))


def narrowed(window_ns: tuple[int, int] | None, steady: Steady | None, opts: Options) -> tuple[int, int] | None:
    """The window where it is not the whole capture's (the user's, or the steady state's); None where it is."""
    return window_ns if (opts.window or steady) else None


declare(narrowed, needs=(window_ns, steady_state, OPTS))


def part(trace: Trace, window_ns: tuple[int, int] | None, opts: Options, first_event: int | None,
         steady: Steady | None) -> Window:
    """The `window` section: the span analysed and where it came from; without GPU activity, the span of the CPU's
    own events (NVTX ranges, OS runtime calls)."""
    if window_ns is None:
        trace.background.wait("host.nvtx")
        nvtx = trace.host.nvtx
        spans = [(int(nvtx["start_ns"].min()), int(nvtx["end_ns"].max()))] if len(nvtx) else []
        spans += [s for s in [trace.osrt.span()] if s]
        return (Window(start_ns=min(s[0] for s in spans), end_ns=max(s[1] for s in spans),
                       source="cpu (no GPU activity)") if spans else Window(source="empty trace"))
    lo, hi = window_ns
    asked = opts.window_asked
    origin_ns, origin_name = span.origin(trace, lambda: first_event)
    teardown = None if opts.window else _teardown_ns(trace.host.nvtx, hi)
    return Window(start_ns=lo, end_ns=hi, duration_ns=hi - lo,
                  source=(f"user: {asked.flag} {asked.text}" if asked else "user") if opts.window else
                  setup.window_source(steady) if steady else "first to last GPU operation or step range",
                  capture_start_ns=first_event, origin_ns=origin_ns, origin=origin_name,
                  teardown_ns=teardown or ABSENT)


declare(part, needs=(TRACE, window_ns, OPTS, first_event, steady_state))


def _teardown_ns(nvtx: pd.DataFrame, end_ns: int) -> int | None:
    """How long the output pipeline's close ran past the window's end (its last drain ends the window; the workers'
    join and the buffers' unpinning and unmapping follow, on the user's clock); None without a close there."""
    close = _named(nvtx, PIPELINE_CLOSE)
    close = close[(close["start_ns"].to_numpy() < end_ns) & (close["end_ns"].to_numpy() > end_ns)]
    return int(close["end_ns"].max()) - end_ns if len(close) else None


def _nvtx(nvtx_rows: pd.DataFrame, narrowed: tuple[int, int] | None, opts: Options) -> Part:
    """The `nvtx` section: the NVTX ranges inside the window by name."""
    shown = nvtx_rows if narrowed is None else overlapping(nvtx_rows, narrowed)
    ns = cpu.nvtx_summary(shown)
    return Part(NvtxPart(count=int(len(shown)), ranges=rows_as(NvtxRange, ns.head(max(opts.top, 20)))),
                {"nvtx_summary": ns})


declare(_nvtx, needs=(nvtx_rows, narrowed, OPTS), part="nvtx", json_at=80, tables_at=80)


def overlapping(df: pd.DataFrame, window: tuple[int, int]) -> pd.DataFrame:
    """The rows of a timed table that overlap the window."""
    keep = (df["end_ns"].to_numpy() > window[0]) & (df["start_ns"].to_numpy() < window[1])
    return df if keep.all() else df[keep].reset_index(drop=True)


def _digest_inside(trace: Trace, window: tuple[int, int]) -> KernelDigest:
    """The kernel digest of the kernels (and graph launches traced whole) that overlap a user's window."""
    return digest_of(overlapping(trace.device.kernels, window), overlapping(trace.device.graph_runs, window))


def _drains(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The output pipeline's drains (fixes.OutputPipeline waiting for its workers): the start and end of each."""
    return _named(nvtx, PIPELINE_DRAIN)


def _named(nvtx: pd.DataFrame, name: str) -> pd.DataFrame:
    """The start and end of every range of that name (none without ranges)."""
    return nvtx.loc[(nvtx["name"] == name).to_numpy(), ["start_ns", "end_ns"]] if len(nvtx) else \
        pd.DataFrame({"start_ns": [], "end_ns": []}, dtype="int64")


# --- the window the user asked for (--window, --steps), in trace ns --------------------------------------------

def resolve_asked(trace: Trace, spec: Spec, step_regex: str | None) -> tuple[int, int]:
    """The window the user asked for (cli/window.py parsed it) in this trace's ns, checked to hold GPU activity:
    TraceError in the user's own terms when it names no span of the trace or an empty one."""
    nvtx = trace.host.nvtx
    win = resolve(spec, trace, step_spans(step_rows_of(nvtx, step_regex_of(nvtx, step_regex))))
    check_has_activity(trace, win, spec)
    return win


def resolve(spec: Spec, trace, step_ranges: pd.DataFrame) -> tuple[int, int]:
    """The span in trace ns; step_ranges: the trace's steps (start_ns, end_ns in order) for --steps."""
    if spec.steps:
        n = len(step_ranges)
        if not n:
            raise TraceError(f"--steps {spec.text}: no steps found in this trace (--step-regex names them); use "
                             "--window instead")
        chosen = step_ranges.iloc[slice(spec.start, spec.end)]
        if chosen.empty:
            raise TraceError(f"--steps {spec.text}: the trace has {n} steps (0 to {n - 1})")
        return int(chosen["start_ns"].min()), int(chosen["end_ns"].max())
    first, last = span.capture_start(trace), span.capture_end(trace)
    if first is None or last is None:
        raise TraceError(f"{trace.source}: --window applies to GPU activity and this trace has none; leave it out")
    origin_ns, _ = span.origin(trace)
    base = (origin_ns or 0) if spec.relative else 0
    lo = base + int(spec.start) if spec.start is not None else first
    hi = base + int(spec.end) if spec.end is not None else last
    if hi <= lo:
        said = ("starts after this trace's last GPU operation or NVTX range" if spec.start is not None and lo >= last
                else "ends before this trace's first GPU operation or NVTX range" if spec.end is not None and hi <= first
                else "ends before it starts in this trace")
        raise TraceError(f"{spec.flag} {spec.text}: {said}; " + where_it_runs(trace, first, last, spec))
    return lo, hi


def where_it_runs(trace, lo: int, hi: int, spec: Spec | None, what: str = "its GPU operations and NVTX ranges") -> str:
    """"<what> run from A to B ms from the session start (--window Ams:Bms covers them)": the trace's own span, in
    the form the user gave (times from the origin with a unit, or trace ns), and a window of this trace to try."""
    origin_ns, origin_name = span.origin(trace)
    if spec is not None and spec.relative and origin_ns is not None:
        a, b = (lo - origin_ns) / 1e6, (hi - origin_ns) / 1e6
        return (f"{what} run from {a:,.1f} to {b:,.1f} ms from the {origin_name} (--window "
                f"{math.floor(a)}ms:{math.ceil(b)}ms covers them)")
    return f"{what} run from {lo} to {hi} ns (--window {lo}:{hi} covers them)"


def check_has_activity(trace, win: tuple[int, int], spec: Spec | None = None) -> None:
    """A user window with no GPU operation in it would give 0/0 figures: refuse it, saying where the activity is
    (in the user's own terms: spec, the window as asked)."""
    frames = [df for df in (trace.device.kernel_digest.ops, trace.device.memcpys, trace.device.memsets) if len(df)]
    if any(df.overlaps(*win) if isinstance(df, SpilledOps) else
           bool(((df["end_ns"] > win[0]) & (df["start_ns"] < win[1])).any()) for df in frames):
        return
    if not frames:
        raise TraceError(f"{trace.source}: --window applies to GPU activity and this trace has none; leave it out")
    lo, hi = min(int(df["start_ns"].min()) for df in frames), max(int(df["end_ns"].max()) for df in frames)
    asked = f"{spec.flag} {spec.text}" if spec is not None else f"--window {win[0]}:{win[1]}"
    raise TraceError(f"{asked}: no GPU activity inside it; " + where_it_runs(trace, lo, hi, spec, "this trace's GPU operations"))
