"""How the traced program ended: whether it failed, with what status and what error, so that a failed run is never
read as a result.

    {"exit_code": int | None,   # the program's exit status (run record `<base>.run.json`: program_exit_code)
     "failed": bool | None,     # None: neither the run record nor the trace says how it ended
     "error": str | None,       # the last line of the Python traceback that ended its stderr, where the trace has it
     "source": "run record" | "trace" | None}   # what `failed` was read from

The run record `nsys-transfer run|profile` writes beside the trace is the authority (nsys returns the program's own
status); without one, the trace itself is read: nsys 2024+ stores the launched program's stderr in the export
(ProcessStreams), and a Python program that died of an exception, or a script Python could not open, ends it with
the traceback or the complaint.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..common.errors import TraceError
from ..load.inputs import capture_record_beside
from ..load.trace import Trace
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ProgramEnd:
    """How the traced program ended: its exit code, whether it failed, its error, and what says so."""
    exit_code: int | None
    failed: bool | None
    error: str | None
    source: str | None

STDERR = ("SELECT s.value AS name, c.value AS content FROM ProcessStreams AS p JOIN StringIds AS s "
          "ON s.id = p.filenameId JOIN StringIds AS c ON c.id = p.contentId")
TRACEBACK = "Traceback (most recent call last):"
CANNOT_OPEN = re.compile(r"^\S*python\S*: can't open file .*$", re.M)   # `python nope.py`
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")               # "RuntimeError: boom", "KeyboardInterrupt"
MAX_ERROR = 200  # characters of the error line kept


def outcome(trace: Trace) -> ProgramEnd:
    """How the program ended (see the module's docstring)."""
    error = _stderr_error(trace)
    code = _recorded_exit_code(trace.source)
    if code is not None:
        return ProgramEnd(exit_code=code, failed=code != 0, error=error if code != 0 else None, source="run record")
    if error is not None:
        return ProgramEnd(exit_code=None, failed=True, error=error, source="trace")
    return ProgramEnd(exit_code=None, failed=None, error=None, source=None)


def _recorded_exit_code(source: str) -> int | None:
    """program_exit_code of the run record beside the trace; None without one (or one that does not say)."""
    path = capture_record_beside(source)
    if path is None:
        return None
    try:
        code = json.loads(Path(path).read_text()).get("program_exit_code")
    except (OSError, ValueError, AttributeError):
        return None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _stderr_error(trace: Trace) -> str | None:
    """The error that ended the program's stderr (the exception line of a final traceback, or Python's "can't open
    file"), from the streams nsys stored in the export; None when it ended otherwise or the export has no streams."""
    if not {"filenameId", "contentId"} <= trace.columns("ProcessStreams"):
        return None
    try:
        streams = trace.query(STDERR)
    except TraceError:
        return None
    for name, content in zip(streams["name"].astype(str), streams["content"]):
        if isinstance(name, str) and name.endswith("stderr.log") and isinstance(content, str):  # NA stays NA
            error = ending_error(content)
            if error:
                return error
    return None


def ending_error(stderr: str) -> str | None:
    """The error a program's stderr ends with: the last line of a traceback that is the last thing written, or
    Python's complaint that it cannot open the script; None otherwise (a traceback a program logged and went on
    from is not its end)."""
    lines = [line for line in stderr.rstrip().splitlines() if line.strip()]
    if not lines:
        return None
    if CANNOT_OPEN.match(lines[-1]):
        return lines[-1][:MAX_ERROR]
    if TRACEBACK not in lines:
        return None
    last = len(lines) - 1 - lines[::-1].index(TRACEBACK)
    tail = lines[last + 1:]
    # a traceback: indented frame lines, then the exception's line, the last unindented one (notes and exception
    # groups are indented); anything unindented after it is output the program went on to write
    unindented = [line for line in tail if not line[0].isspace()]
    if tail and tail[0][0].isspace() and len(unindented) == 1 and EXCEPTION_LINE.match(unindented[0]):
        return unindented[0][:MAX_ERROR]
    return None
