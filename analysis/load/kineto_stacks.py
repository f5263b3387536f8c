"""The program's Python stacks in a torch.profiler trace recorded with with_stack=True, in the form the stacks file
gives them (load/python_stacks.PythonStacks), so that sections/code_lines.py names the line the same way.

Kineto records every Python call as an event with its enter and exit times, its id and its caller's id
(KINETO_HOST_EVENTS, written by load/kineto.py): an exact call tree, not samples. It is read on a grid of GRID_NS:
at each instant, the innermost call open on the thread and its callers are the stack, and the sample stands for the
GRID_NS before it, as a sampled stack stands for the time since the sampler's instant before. The line of each
caller is where it made the call (the callee's CallFrom, PyTorch 2.1 and later; the function's line before that).
Kineto records no source text: a line's text says what it called there (`calls .numpy()`), which is what the roles
read (sections/roles.py).

File names: Kineto writes each file relative to the sys.path entry it was found under (`torch/nn/modules/module.py`,
`typing.py`, `main.py`). The program's own files are the one that started it (the outermost frame's) and the files
beside it (no folder, not a standard library module); the others are written as a library's
(`/site-packages/torch/...`) or Python's own (`<stdlib>/json/decoder.py`), as the stacks file has them.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from nsys_transfer.analysis.load.kineto import HOST_EVENTS, PYTHON
from nsys_transfer.analysis.load.python_stacks import Frame, PythonStacks

GRID_NS = 1_000_000  # 1 ms: finer than the sampler's 10 ms, a few thousand samples a second a thread
NAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<function>.*)$")
BUILTIN_METHOD = re.compile(r"^<built-in method (?P<name>\S+) of ")
BUILTIN_FUNCTION = re.compile(r"^<built-in function (?P<name>[^>]+)>")
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
NO_STACKS = ("the torch.profiler trace holds no Python functions, so no finding names its line; record it with "
             "torch.profiler.profile(..., with_stack=True)")


def read(trace) -> PythonStacks:
    """The trace's Python stacks on its own clock; ValueError saying why there are none."""
    if not trace.has(HOST_EVENTS):
        raise ValueError(NO_STACKS)
    ev = trace.reader.int_columns(HOST_EVENTS, {"start": "start", "end": '"end"', "tid": "globalTid", "id": "pyId",
                                                "parent": "parentId", "name": "nameId", "call_from": "callFromId"},
                                  f"WHERE kind = {PYTHON}")
    if ev.empty:
        raise ValueError(NO_STACKS)
    ev = ev.sort_values(["tid", "start", "end"], ascending=[True, True, False], ignore_index=True)
    parent = _parent_rows(ev["id"].to_numpy(), ev["parent"].to_numpy())
    names = trace.strings(np.unique(np.concatenate([ev["name"].to_numpy(), ev["call_from"].to_numpy()])))
    frames = _Frames(names, ev, parent)
    rows = []
    for tid, g in ev.groupby("tid", sort=True):
        rows.append(_thread_samples(int(tid), g.index.to_numpy(), ev, parent, frames))
    samples = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if samples.empty:
        raise ValueError(NO_STACKS)
    return PythonStacks(samples, frames.stacks, frames.frames, GRID_NS, Path(trace.source))


def _parent_rows(ids: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Each event's caller as a row index (-1: none recorded)."""
    order = np.argsort(ids, kind="stable")
    at = np.searchsorted(ids[order], parents)
    at = np.clip(at, 0, max(len(ids) - 1, 0))
    found = (parents >= 0) & (ids[order][at] == parents)
    return np.where(found, order[at], -1)


def _thread_samples(tid: int, rows: np.ndarray, ev: pd.DataFrame, parent: np.ndarray, frames: "_Frames"
                    ) -> pd.DataFrame:
    """One thread's samples on the grid: at each instant, the innermost call open then."""
    starts, ends = ev["start"].to_numpy(), ev["end"].to_numpy()
    lo, hi = int(starts[rows].min()), int(ends[rows].max())
    t = np.arange((lo // GRID_NS + 1) * GRID_NS, hi + 1, GRID_NS, dtype=np.int64)
    at = np.searchsorted(starts[rows], t, side="right") - 1  # the last call begun by t, on this thread
    at = np.where(at >= 0, rows[np.clip(at, 0, None)], -1)
    for _ in range(1024):  # up its callers until one is still open at t (the depth of the deepest stack)
        closed = (at >= 0) & (ends[np.clip(at, 0, None)] <= t)
        if not closed.any():
            break
        at[closed] = parent[at[closed]]
    keep = at >= 0
    t, at = t[keep], at[keep]
    stack = np.array([frames.stack_of(int(i)) for i in at], dtype=np.int64)
    pid, os_tid = (tid >> 24) & 0xFFFFFF, tid & 0xFFFFFF
    return pd.DataFrame({"start_ns": t - GRID_NS, "end_ns": t, "pid": np.full(len(t), pid, np.int64),
                         "tid": np.full(len(t), os_tid, np.int64), "stack": stack})


class _Frames:
    """Frames and stacks, each made once: a stack per innermost call, a frame per (place, what it called)."""

    def __init__(self, names: dict[int, str], ev: pd.DataFrame, parent: np.ndarray):
        self.names, self.parent = names, parent
        self.name_ids, self.call_from = ev["name"].to_numpy(), ev["call_from"].to_numpy()
        self.frames: list[Frame] = []
        self.stacks: list[tuple[int, ...]] = []
        self._frame_ids: dict[Frame, int] = {}
        self._stack_ids: dict[int, int] = {}
        self._stack_index: dict[tuple[int, ...], int] = {}
        self.program = self._program_files(ev)

    def _program_files(self, ev: pd.DataFrame) -> set[str]:
        """The files of the outermost calls (the script the program started from)."""
        roots = np.flatnonzero(self.parent < 0)
        out = set()
        for i in roots[:1000]:
            m = NAME.match(self.names.get(int(self.name_ids[i]), ""))
            if m and m["function"] == "<module>":
                out.add(m["file"])
        return out

    def stack_of(self, row: int) -> int:
        """The stack index of the calls open at the innermost call `row`."""
        got = self._stack_ids.get(row)
        if got is not None:
            return got
        chain = [row]
        while self.parent[chain[-1]] >= 0 and len(chain) < 1024:
            chain.append(int(self.parent[chain[-1]]))
        chain.reverse()  # outermost first
        ids = []
        for k, i in enumerate(chain):
            callee = chain[k + 1] if k + 1 < len(chain) else None
            ids.append(self._frame(i, callee))
        key = tuple(ids)
        got = self._stack_index.get(key)
        if got is None:
            got = self._stack_index[key] = len(self.stacks)
            self.stacks.append(key)
        self._stack_ids[row] = got
        return got

    def _frame(self, row: int, callee: int | None) -> int:
        name = self.names.get(int(self.name_ids[row]), "?")
        m = NAME.match(name)
        # not `file(line): function`: a built-in (`<built-in method numpy of ...>`) or torch's marker of a module's
        # call (`nn.Module: Conv2d_1`): no file of the program's
        file, line, function = (m["file"], int(m["line"]), m["function"]) if m else \
            (name if name.startswith("<") else f"<{name}>", 0, _builtin(name))
        code = ""
        if callee is not None:
            where = self.names.get(int(self.call_from[callee]), "")
            if ":" in where and where.rsplit(":", 1)[1].isdigit():
                line = int(where.rsplit(":", 1)[1])
            code = f"calls {_callee(self.names.get(int(self.name_ids[callee]), '?'))}"
        frame = Frame(self._path(file), line, function, code)
        got = self._frame_ids.get(frame)
        if got is None:
            got = self._frame_ids[frame] = len(self.frames)
            self.frames.append(frame)
        return got

    def _path(self, file: str) -> str:
        """The file as the stacks file would name it: the program's as Kineto gives it, a library's under
        /site-packages/, Python's own under <stdlib>/."""
        if file.startswith(("<", "/")) or file in self.program:
            return file
        top = file.split("/", 1)[0]
        if "/" not in file:
            return f"<stdlib>/{file}" if Path(file).stem in STDLIB else file
        if any(p.split("/", 1)[0] == top for p in self.program if "/" in p):
            return file  # beside the program's own package
        return f"<stdlib>/{file}" if top in STDLIB else f"/site-packages/{file}"


def _builtin(name: str) -> str:
    m = BUILTIN_METHOD.match(name) or BUILTIN_FUNCTION.match(name)
    return m["name"] if m else name


def _callee(name: str) -> str:
    """How a call reads at the line that made it: `.numpy()` (a method of a built-in type), `len()`, `step()`."""
    m = BUILTIN_METHOD.match(name)
    if m:
        return f".{m['name']}()"
    m = BUILTIN_FUNCTION.match(name) or NAME.match(name)
    return f"{m['name'] if 'name' in m.groupdict() else m['function']}()" if m else name
