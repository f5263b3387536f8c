"""`--window` and `--steps`: the span a user asks for, as a user says it, parsed into a Spec (the facade resolves it
against the trace, in trace ns: sections/window.resolve_asked).

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

from .options import MAX_NS
from ..facade import Spec, TraceError

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
