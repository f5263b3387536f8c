"""`--window` and `--steps`: the span a user asks for, as a user says it, turned into trace ns.

    --window 8771928647:13472651983   trace ns (whole numbers: what the JSON's `window` holds)
    --window 1200ms:4500ms            from the capture's start: the session start the export records (trace time 0),
                                      else its first GPU operation or NVTX range (span.origin); units ns, us, ms, s
    --window 1.2s:                    an open end: to the end of the capture (or from its start, `:4.5s`)
    --steps 3:                        from the 4th step on (Python's slice of the steps: 0-based, end excluded)
    --steps 2:5                       steps 2, 3 and 4

A number without a unit that is not a whole number of ns is refused, never truncated (0.1:0.5 is not 0:0).
"""
from __future__ import annotations

import math
import re

import pandas as pd

from nsys_transfer.analysis.sections.cpu import detect_step_regex
from nsys_transfer.analysis.sections.program import matching
from nsys_transfer.analysis.common.errors import TraceError
from nsys_transfer.analysis.load import span
from nsys_transfer.analysis.load.ops_store import SpilledOps
from nsys_transfer.analysis.cli.options import MAX_NS
from nsys_transfer.analysis.common.window_spec import Spec

UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
PART = re.compile(r"^\s*(\d+(?:\.\d*)?(?:e[+-]?\d+)?|\.\d+)\s*(ns|us|ms|s)?\s*$", re.IGNORECASE)
STEP = re.compile(r"^\s*(\d*)\s*:\s*(\d*)\s*$")


def parse_span(window_text: str | None, steps_text: str | None, whole: bool = False) -> Spec | None:
    """`--window` or `--steps`, whichever was given; TraceError when both were, when the one given is not a span, or
    when --whole (the whole capture) names the span too."""
    if window_text and steps_text:
        raise TraceError("--window and --steps both name the span: give one")
    win = parse_window(window_text) or parse_steps(steps_text)
    if whole and win:
        raise TraceError(f"--whole and {win.flag} both name the span: give one")
    return win


def parse_window(text: str | None) -> Spec | None:
    """`--window` as the user wrote it; TraceError in one line when it is not a span."""
    if not text:
        return None
    parts = text.split(":")
    if len(parts) != 2:
        raise TraceError(f"--window {text}: use START:END, trace ns (8771928647:13472651983) or times from the "
                         "capture's start with a unit (1200ms:4500ms, 1.2s:4.5s)")
    found = [PART.match(p) if p.strip() else None for p in parts]
    if any(p.strip() and m is None for p, m in zip(parts, found)) or not any(found):
        if any(re.search(r"inf|nan", p, re.I) for p in parts):
            raise TraceError(f"--window {text}: START and END must be finite numbers")
        raise TraceError(f"--window {text}: use START:END, trace ns (8771928647:13472651983) or times from the "
                         "capture's start with a unit (1200ms:4500ms, 1.2s:4.5s)")
    units = {m.group(2).lower() if m.group(2) else None for m in found if m}
    relative = units != {None}
    if relative and None in units:
        raise TraceError(f"--window {text}: give both ends a unit (1200ms:4500ms), or neither (trace ns)")
    values = [float(m.group(1)) * UNIT_NS[(m.group(2) or "ns").lower()] if m else None for m in found]
    for v in values:
        if v is not None and not math.isfinite(v):
            raise TraceError(f"--window {text}: START and END must be finite numbers")
        if v is not None and v > MAX_NS:
            raise TraceError(f"--window {text}: trace timestamps run from 0 to at most {MAX_NS:.2e} ns")
    if not relative and any(v is not None and v != int(v) for v in values):
        raise TraceError(f"--window {text}: numbers without a unit are trace ns and must be whole; for times from the "
                         "capture's start give a unit (100ms:500ms, 0.1s:0.5s)")
    if values[0] is not None and values[1] is not None and values[1] <= values[0]:
        raise TraceError(f"--window {text}: END must be after START")
    return Spec(text, "--window", values[0], values[1], relative=relative)


def parse_steps(text: str | None) -> Spec | None:
    """`--steps A:B` (0-based, B excluded, either end open); TraceError when it is not one."""
    if not text:
        return None
    m = STEP.match(text)
    if not m or not (m.group(1) or m.group(2)):
        raise TraceError(f"--steps {text}: use FIRST:END step numbers, 0-based with END left out (3: skips the first "
                         "three steps; 2:5 keeps steps 2, 3 and 4)")
    a, b = (int(g) if g else None for g in m.groups())
    if a is not None and b is not None and b <= a:
        raise TraceError(f"--steps {text}: END must be after FIRST")
    return Spec(text, "--steps", a, b, steps=True)


def step_ranges(nvtx: pd.DataFrame, regex: str | None) -> pd.DataFrame:
    """The step ranges in start order (the given regex, else the detected one), for --steps."""
    regex = regex or detect_step_regex(nvtx)
    if not regex or nvtx.empty:
        return pd.DataFrame(columns=["start_ns", "end_ns"])
    st = nvtx[matching(nvtx["name"], regex)]
    return st[["start_ns", "end_ns"]].sort_values("start_ns", ignore_index=True)


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
