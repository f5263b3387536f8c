"""How the loop's line reaches the work a Python stack sample was doing: the path the code section (code_lines.py)
shows beside each line (`for batch in loader -> _BaseDataLoaderIter.__next__ (torch) -> 2 DataLoader worker
processes -> Frames.__getitem__ (infer.py:18) -> roll (numpy)`), each frame as a person names it, the line's role,
the path the most time took, and, where the loop waits on a DataLoader, the work its worker processes did."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..load.python_stacks import Frame, PythonStacks
from . import roles

PATH_STEPS = 6     # frames shown between the loop's line and the work
# a DataLoader's iterator, as label() names its frame: the loop's wait for a batch goes through it
LOADER_NEXT = re.compile(r"^_\w*DataLoaderIter\.__next__ \(torch\)$")
LOADER_WORKER = re.compile(r"torch/utils/data/_utils/worker\.py$")
PROGRAM_LABEL = re.compile(r"\([^()]*:\d+\)$")  # `Images.__getitem__ (main.py:17)`: a frame of the program's own


def _package(file: str) -> str:
    m = re.search(r"/(?:site|dist)-packages/([A-Za-z0-9_]+)", file)
    return m.group(1) if m else "python"


def label(frame: Frame) -> str:
    """A frame as a person names it: `Images.__getitem__ (main.py:17)`, `_BaseDataLoaderIter.__next__ (torch)`."""
    where = frame.place if frame.in_program else _package(frame.file)
    return f"{frame.function} ({where})"


@dataclass(frozen=True)
class StackPath:
    """One distinct stack as the code section reads it: its innermost frame of the program's own (an index into the
    frames, -1 when the stack has none), the path from the loop's line to the work, what the work is for, and the
    frame of the loop's line the path starts at (-1 without one)."""
    leaf: int
    path: tuple[str, ...]
    role: str
    loop: int = -1


def stack_path(stack: tuple[int, ...], frames: list[Frame]) -> StackPath:
    """A stack's innermost line of the program, the path to it from the loop's line, and its role."""
    user = [i for i, f in enumerate(stack) if frames[f].in_program]
    if not user:
        return StackPath(-1, (), roles.role_of([frames[f] for f in stack], None))
    leaf = user[-1]
    # the path starts at the loop's line: the program's frame that calls into a library first, or, where the work is
    # the program's own functions all the way, the caller of the innermost (`postprocess(d, l)` -> its line)
    first_lib = next((i for i, f in enumerate(stack) if i > user[0] and not frames[f].in_program), len(stack))
    callers = [i for i in user if i < first_lib and frames[stack[i]].function != "<module>"]
    loop = callers[-2] if len(callers) >= 2 and callers[-1] == leaf else (callers[-1] if callers else leaf)
    shown, prev_user = [], True
    for i in range(loop, len(stack)):
        f = frames[stack[i]]
        if f.in_program or prev_user or i == len(stack) - 1:  # user frames, each library entry, and the innermost
            shown.append(label(f) if i != loop else f"{f.place}  {f.code}")
        prev_user = f.in_program
    leaf_frame = frames[stack[leaf]]
    return StackPath(stack[leaf], tuple(shown) if loop != leaf or len(stack) > leaf + 1 else (),
                     roles.role_of([frames[f] for f in stack], leaf_frame), stack[loop])


def _is_program_label(step: str) -> bool:
    return bool(PROGRAM_LABEL.search(step)) or "  " in step  # the loop's own line: `main.py:31  for x in loader`


def heaviest_path(paths: list[tuple[str, ...]], weights: np.ndarray) -> tuple[str, ...]:
    """The path the most time took, summed over the samples that took it (one long sample must not pick it), a path
    that goes somewhere first: one that stops at the line itself shows nothing of how the work is reached."""
    by: dict[tuple[str, ...], float] = {}
    for p, w in zip(paths, weights):
        by[p] = by.get(p, 0.0) + float(w)
    going = {p: w for p, w in by.items() if p}
    return max(going, key=lambda p: going[p]) if going else ()


def shortened(shown) -> tuple[str, ...]:
    """A path of at most PATH_STEPS steps: the first ones, `...`, the innermost."""
    shown = list(shown)
    return tuple([*shown[:PATH_STEPS - 1], "...", shown[-1]] if len(shown) > PATH_STEPS else shown)


@dataclass(frozen=True)
class LoaderWork:
    """The DataLoader's worker processes: how many were sampled, their time in all, and the path of the work that
    took most of it, from its first frame of the program's own (`Images.__getitem__ (main.py:17)`) inward."""
    processes: int
    ns: int
    path: tuple[str, ...]


def through_loader(path: tuple[str, ...], loader: LoaderWork | None) -> tuple[str, ...]:
    """A path that ends waiting in the DataLoader (`for x in loader` -> `_BaseDataLoaderIter.__next__ (torch)` ->
    a library's wait) carried on into its worker processes and the work they did there (`__getitem__`), where the
    program has DataLoader workers (loader: loader_work's): the loop's line and the work it waits for on one path."""
    at = next((i for i, step in enumerate(path) if LOADER_NEXT.match(step)), None)
    if loader is None or at is None or any(_is_program_label(step) for step in path[at + 1:]):
        return path
    return (*path[:at + 1], f"{loader.processes} DataLoader worker process{'es' if loader.processes > 1 else ''}",
            *loader.path)


def loader_work(stacks: PythonStacks) -> LoaderWork | None:
    """The work of the processes whose stacks run in a DataLoader worker's loop (torch/utils/data/_utils/worker.py),
    at the line of the program's own below that loop that took most of their time (a forked worker's stack still
    holds the frames it was forked from, the loop's among them: those are not its work); None where the program has
    none (num_workers=0), or they ran none of the program's own code."""
    frames = stacks.frames
    inner: dict[int, tuple[int, ...]] = {}  # each worker stack from its worker loop inward, where it holds program code
    for k, stack in enumerate(stacks.stacks):
        at = next((i for i, f in enumerate(stack) if LOADER_WORKER.search(frames[f].file)), None)
        if at is not None and any(frames[f].in_program for f in stack[at:]):
            inner[k] = stack[at:]
    s = stacks.samples
    mine = s[s["stack"].isin(list(inner))] if len(s) and inner else s.iloc[0:0]
    if mine.empty:
        return None
    ns = (mine["end_ns"] - mine["start_ns"]).to_numpy(np.int64)
    by_stack = pd.Series(ns, index=mine["stack"].to_numpy()).groupby(level=0).sum()
    by_leaf = pd.Series({k: [f for f in inner[k] if frames[f].in_program][-1] for k in by_stack.index})
    top_leaf = by_stack.groupby(by_leaf).sum().idxmax()
    stack = inner[by_stack[by_leaf == top_leaf].idxmax()]  # the stack of that line the most time took
    first = next(i for i, f in enumerate(stack) if frames[f].in_program)
    shown, prev_user = [], True
    for i in range(first, len(stack)):
        f = frames[stack[i]]
        if f.in_program or prev_user or i == len(stack) - 1:
            shown.append(label(f))
        prev_user = f.in_program
    return LoaderWork(int(mine["pid"].nunique()), int(ns.sum()), tuple(shown))
