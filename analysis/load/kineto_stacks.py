"""The program's Python stacks in a torch.profiler trace recorded with with_stack=True, in the form the stacks file
gives them (load/python_stacks.PythonStacks), so that sections/code_lines.py names the line the same way.

Kineto records every Python call as an event with its enter and exit times, its id and its caller's id
(KINETO_HOST_EVENTS, written by load/kineto.py): an exact call tree, not samples. It is read on a grid of GRID_NS:
at each instant, the innermost call open on the thread and its callers are the stack, and the sample stands for the
GRID_NS before it, as a sampled stack stands for the time since the sampler's instant before. The line of each
caller is where it made the call (the callee's CallFrom, recorded by newer PyTorch); where the trace does not say
(PyTorch 2.11 records none), the line is unknown (0) and the place names the function instead. The innermost call's
own line is never recorded (its name holds the function's first line, its `def`): it is unknown (0) too, so a
function's first line is never shown as the line.
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

from .btree import In
from .kineto import HOST_EVENTS, PYTHON
from .python_stacks import Frame, PythonStacks

GRID_NS = 1_000_000  # 1 ms: finer than the sampler's 10 ms, a few thousand samples a second a thread
MAX_DEPTH = 1024     # calls deep: past Python's own default recursion limit
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
    # read in chunks (a 2 GB trace holds millions of calls), in the table's order: by start, an enclosing call first
    ev = trace.reader.table_columns(HOST_EVENTS, {"start": "start", "end": '"end"', "tid": "globalTid", "id": "pyId",
                                                  "parent": "parentId", "name": "nameId", "call_from": "callFromId"},
                                    (In("kind", (PYTHON,)),))
    if ev.empty:
        raise ValueError(NO_STACKS)
    parent = _parent_rows(ev["id"].to_numpy(), ev["parent"].to_numpy())
    names = trace.strings(np.unique(np.concatenate([ev["name"].to_numpy(), ev["call_from"].to_numpy()])))
    chains = _Chains(names, ev["name"].to_numpy(), ev["call_from"].to_numpy(), parent)
    tids = ev["tid"].to_numpy()
    by_thread = np.argsort(tids, kind="stable")  # each thread's calls, still in start order
    bounds = np.flatnonzero(np.diff(tids[by_thread])) + 1
    rows = [_thread_samples(int(tids[part[0]]), part, ev["start"].to_numpy(), ev["end"].to_numpy(), parent, chains)
            for part in np.split(by_thread, bounds) if len(part)]
    samples = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if samples.empty:
        raise ValueError(NO_STACKS)
    return PythonStacks(samples, chains.stacks, chains.frames, GRID_NS, Path(trace.source))


def has_call_sites(trace) -> bool:
    """Whether the trace's Python calls say where each was called from (`CallFrom`, newer PyTorch): without it a
    caller's line is unknown, and its place names its function."""
    return trace.has(HOST_EVENTS) and trace.one_row(f"SELECT 1 FROM {HOST_EVENTS} WHERE kind = {PYTHON} AND "
                                                    "callFromId IS NOT NULL LIMIT 1") is not None


def _parent_rows(ids: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Each event's caller as a row index (-1: none recorded)."""
    order = np.argsort(ids, kind="stable")
    at = np.searchsorted(ids[order], parents)
    at = np.clip(at, 0, max(len(ids) - 1, 0))
    found = (parents >= 0) & (ids[order][at] == parents)
    return np.where(found, order[at], -1)


def _thread_samples(tid: int, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray, parent: np.ndarray,
                    chains: "_Chains") -> pd.DataFrame:
    """One thread's samples on the grid: at each instant, the innermost call open then (rows: the thread's calls in
    start order)."""
    lo, hi = int(starts[rows].min()), int(ends[rows].max())
    t = np.arange((lo // GRID_NS + 1) * GRID_NS, hi + 1, GRID_NS, dtype=np.int64)
    at = np.searchsorted(starts[rows], t, side="right") - 1  # the last call begun by t, on this thread
    at = np.where(at >= 0, rows[np.clip(at, 0, None)], -1)
    for _ in range(MAX_DEPTH):  # up its callers until one is still open at t
        closed = (at >= 0) & (ends[np.clip(at, 0, None)] <= t)
        if not closed.any():
            break
        at[closed] = parent[at[closed]]
    keep = at >= 0
    t, at = t[keep], at[keep]
    stack = np.array([chains.stack_of(int(i)) for i in at], dtype=np.int64)
    pid, os_tid = (tid >> 24) & 0xFFFFFF, tid & 0xFFFFFF
    return pd.DataFrame({"start_ns": t - GRID_NS, "end_ns": t, "pid": np.full(len(t), pid, np.int64),
                         "tid": np.full(len(t), os_tid, np.int64), "stack": stack})


class _Chains:
    """Stacks and frames, each made once. A call's chain (its callers and itself) is interned by (its caller's chain,
    its name, where it was called from): the same stack reached again and again, step after step, by calls of
    other ids, is made once. A chain's stack is its callers' frames, each at the line it called from, and its own."""

    def __init__(self, names: dict[int, str], name_ids: np.ndarray, call_from: np.ndarray, parent: np.ndarray):
        self.names, self.name_ids, self.call_from, self.parent = names, name_ids, call_from, parent
        self.frames: list[Frame] = []
        self.stacks: list[tuple[int, ...]] = []
        self._frame_ids: dict[Frame, int] = {}
        self._chain_of_row: dict[int, int] = {}
        self._chains: dict[tuple[int, int, int], int] = {}
        self._callers: list[tuple[int, ...]] = []   # per chain: its callers' frames, each at the line it called from
        self._last: list[tuple[int, int]] = []       # per chain: its own call's (name id, call-from id)
        self._stack: dict[int, int] = {}             # chain -> stack index
        self.program = self._program_files(name_ids, parent)

    def _program_files(self, name_ids: np.ndarray, parent: np.ndarray) -> set[str]:
        """The files of the outermost calls at module level (the script the program started from)."""
        out = set()
        for i in np.unique(name_ids[parent < 0])[:1000]:
            m = NAME.match(self.names.get(int(i), ""))
            if m and m["function"] == "<module>":
                out.add(m["file"])
        return out

    def stack_of(self, row: int) -> int:
        """The stack index of the calls open at the innermost call `row`."""
        chain = self._chain(row)
        got = self._stack.get(chain)
        if got is None:
            name_id, _ = self._last[chain]
            got = self._stack[chain] = len(self.stacks)
            self.stacks.append((*self._callers[chain], self._frame(name_id, None, None)))
        return got

    def _chain(self, row: int) -> int:
        path = []
        while row >= 0 and row not in self._chain_of_row and len(path) < MAX_DEPTH:
            path.append(row)
            row = int(self.parent[row])
        chain = self._chain_of_row.get(row, -1) if row >= 0 else -1
        for r in reversed(path):  # outermost first
            key = (chain, int(self.name_ids[r]), int(self.call_from[r]))
            got = self._chains.get(key)
            if got is None:
                got = self._chains[key] = len(self._last)
                callers = ()
                if chain >= 0:  # the caller's frame, at the line this call was made from, calling it
                    caller_name, _ = self._last[chain]
                    callers = (*self._callers[chain], self._frame(caller_name, key[2], key[1]))
                self._callers.append(callers)
                self._last.append((key[1], key[2]))
            self._chain_of_row[r] = chain = got
        return chain

    def _frame(self, name_id: int, call_from: int | None, callee: int | None) -> int:
        """A frame of the call named name_id; where it called `callee` (a name id), at the line call_from says."""
        name = self.names.get(name_id, "?")
        m = NAME.match(name)
        # not `file(line): function`: a built-in (`<built-in method numpy of ...>`) or torch's marker of a module's
        # call (`nn.Module: Conv2d_1`): no file of the program's
        file, line, function = (m["file"], int(m["line"]), m["function"]) if m else \
            (name if name.startswith("<") else f"<{name}>", 0, _builtin(name))
        code = ""
        if callee is None:
            # the innermost call: Kineto's name holds its function's first line (its `def`), not the line it is at,
            # which the trace never records: unknown (0), so the place names the function
            line = 0
        else:
            where = self.names.get(call_from, "") if call_from is not None and call_from >= 0 else ""
            # without the call's site the caller's line is unknown (0): Kineto's name holds its function's first
            # line, or, for a call already open when the profiler started, the line it was at then
            line = int(where.rsplit(":", 1)[1]) if ":" in where and where.rsplit(":", 1)[1].isdigit() else 0
            code = f"calls {_callee(self.names.get(callee, '?'))}"
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
