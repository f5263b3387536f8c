"""The program's Python stacks, sampled by `nsys-transfer run` into BASE.pystacks.gz beside the trace
(profiling/stack-sampler/nsys_transfer_pystacks.py says how), on the trace's clock: which line of the program each
thread was on, and for how long.

A sample stands for the time since the sampler's instant before it in its process: the sampler reads
the stacks with the GIL held, so a C call that holds the GIL delays the next sample until it returns, and that
sample's stack is the line that made the call."""
from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ...nsys_core.contracts import PYSTACKS_SUFFIX

SUFFIX = PYSTACKS_SUFFIX
CAPTURE_HINT = ("capture it with `nsys-transfer run -o BASE -- python PROGRAM` (or `make trace`), which samples the "
                "Python stacks by default into BASE.pystacks.gz beside the trace")


# a library's, Python's own, or the profiling's (this toolkit, its sampler, the fixes library): not the program's
LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python\d\.\d+/|^<|/nsys_transfer/|nsys_transfer_pystacks|"
                     r"/fixes/(pipeline|workers|copier|slots|prefetch|pace|lifetime|delivery|checksums|scalars|ranges|"
                     r"tree|errors)\.py$")


@dataclass(frozen=True)
class Frame:
    """One place in the program: a line of a function of a file, with the line's source text."""
    file: str
    line: int
    function: str
    code: str

    @property
    def in_program(self) -> bool:
        """Whether the frame is the program's own code (not a library's, not Python's, not the profiling's)."""
        return not LIBRARY.search(self.file)

    @property
    def place(self) -> str:
        """`main.py:31`."""
        return place_of(self.file, self.line, self.function)


def place_of(file: str, line: int, function: str = "") -> str:
    """A line as a person names it: `main.py:31`; `main.py, in run()` where the line is unknown (0: a torch.profiler
    trace that records no call sites)."""
    if line > 0 or not function:
        return f"{Path(file).name}:{line}"
    return f"{Path(file).name}, in {function}()"


@dataclass
class PythonStacks:
    """samples: start_ns, end_ns (the time each sample stands for, trace clock), pid, tid, stack (an index into
    stacks); stacks: each stack's frames as indices into frames, outermost first; frames: every place seen;
    period_ns: the sampling period."""
    samples: pd.DataFrame
    stacks: list[tuple[int, ...]]
    frames: list[Frame]
    period_ns: int
    path: Path
    cut: bool = False  # the file ends mid-way (a damaged copy): the samples after the cut are missing

    @cached_property
    def in_program(self) -> np.ndarray:
        """For each stack (an index into stacks), whether a frame of it is the program's own code (read once)."""
        frames = self.frames
        return np.array([any(frames[f].in_program for f in k) for k in self.stacks], bool)

    def of_processes(self, pids) -> "PythonStacks":
        """The samples of these processes only (a trace's own: a stacks file beside it may be another capture's)."""
        keep = self.samples["pid"].isin(list(pids)).to_numpy()
        return PythonStacks(self.samples[keep].reset_index(drop=True), self.stacks, self.frames, self.period_ns,
                            self.path, self.cut)


TRACE_SUFFIXES = (".sqlite.xz", ".sqlite", ".nsys-rep")  # what `run` writes beside BASE; BASE may hold dots


def beside(trace_source: str | Path) -> Path | None:
    """BASE.pystacks.gz beside the trace BASE.sqlite (or .sqlite.xz, .nsys-rep); None when there is none."""
    p = Path(trace_source)
    base = next((p.name[: -len(x)] for x in TRACE_SUFFIXES if p.name.endswith(x)), p.name)
    candidate = p.with_name(base + SUFFIX)
    return candidate if candidate.is_file() else None


class _Process:
    """One process's part of the file: its ids are its own, made global as they are read."""

    def __init__(self, header: list[str], session_utc_ns: int, out: "_Reader"):
        self.pid, mono0, utc0, self.period = (int(x) for x in header[1:5])
        self.offset = utc0 - mono0 - session_utc_ns  # trace ns = monotonic ns + offset
        self.frame_ids: dict[int, int] = {}
        self.stack_ids: dict[int, int] = {}
        self.out = out

    def line(self, kind: str, rest: str) -> None:
        if kind == "F":
            head, _, tail = rest.partition("\t")
            fid, line, function = head.split(" ", 2)
            file, _, code = tail.partition("\t")
            self.frame_ids[int(fid)] = len(self.out.frames)
            self.out.frames.append(Frame(file, int(line), function, code))
        elif kind == "K":
            sid, _, ids = rest.partition(" ")
            self.stack_ids[int(sid)] = len(self.out.stacks)
            self.out.stacks.append(tuple(self.frame_ids[int(i)] for i in ids.split(",") if i))
        elif kind == "S":
            t, tid, sid = rest.split(" ")
            self.out.rows.append((int(t) + self.offset, self.pid, int(tid), self.stack_ids[int(sid)]))


class _Reader:
    def __init__(self):
        self.frames: list[Frame] = []
        self.stacks: list[tuple[int, ...]] = []
        self.rows: list[tuple[int, int, int, int]] = []
        self.periods: list[int] = []


def read(path: Path, session_utc_ns: int) -> PythonStacks:
    """The stacks file at path on the clock of a trace whose session began at session_utc_ns (UTC). ValueError when
    it is damaged past its last whole line (a process killed mid-write leaves a partial last line: it is dropped)."""
    out, proc = _Reader(), None
    try:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            for raw in f:
                line = raw.rstrip("\n")
                if not line:
                    continue
                kind, _, rest = line.partition(" ")
                try:
                    if kind == "H":
                        proc = _Process(line.split(" "), session_utc_ns, out)
                        out.periods.append(proc.period)
                    elif proc is not None:
                        proc.line(kind, rest)
                except (ValueError, KeyError, IndexError):
                    continue  # a line cut by a kill: its process's later lines may still be whole
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as e:
        if not out.rows:
            raise ValueError(f"{path.name}: not a readable Python stacks file ({e}); capture the program again") \
                from None
        cut = True
    else:
        cut = False
    if not out.rows:
        raise ValueError(f"{path.name}: no Python stack samples in it (not a stacks file that nsys-transfer run "
                         "wrote, or the program ended before its first sample); capture the program again")
    period = int(np.median(out.periods)) if out.periods else 10_000_000
    return PythonStacks(_spans(out.rows, period), out.stacks, out.frames, period, path, cut)


def _spans(rows: list[tuple[int, int, int, int]], period: int) -> pd.DataFrame:
    """Samples with the time each stands for: from the process's previous sampling instant (every thread of a process
    is read at one instant), so that a call holding the GIL counts whole, at the line that made it."""
    df = pd.DataFrame(rows, columns=["end_ns", "pid", "tid", "stack"])
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("start_ns", "end_ns", "pid", "tid", "stack")})
    instants = df[["pid", "end_ns"]].drop_duplicates().sort_values(["pid", "end_ns"], ignore_index=True)
    before = instants.groupby("pid")["end_ns"].shift(1)
    instants["start_ns"] = before.fillna(instants["end_ns"] - period).astype("int64")
    df = df.merge(instants, on=["pid", "end_ns"], how="left")
    return df.sort_values(["pid", "tid", "end_ns"], kind="stable", ignore_index=True)[
        ["start_ns", "end_ns", "pid", "tid", "stack"]]
