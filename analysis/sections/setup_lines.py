"""A program's set-up on its main thread, read from its Python stacks: importing modules (`import torch`: seconds),
building the model and loading its weights, before the loop. It is paid once a run, as the warm-up is, so a capture
without GPU work names it apart (sections/code_lines.py) rather than ranking `import torch` above the loop's own
lines, and verify's loop starts after it (sections/loop.py cpu_of).

Where the set-up ends: each sample of the main thread counts +its time when it is set-up (an import, a model's
construction, a weights load) and -its time otherwise; the set-up ends where that running sum is highest. Imports done
later (a lazy import in the first step) are mostly too short to move that point, and a loop that builds something
each step keeps the point before it. Where such an import does move it (numpy's first `np.random` inside a Dataset's
`__getitem__`), or the loop's first batch is fetched before its first step's range starts, the samples before the
loop's start whose stack passes through one of the loop's own lines are the loop's work, never set-up (in_loop)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..load.python_stacks import Frame

IMPORT_MACHINERY = "<frozen importlib"  # Python's import system: a module's body runs under it
# a library frame that builds a model or loads its weights: a torch module's constructor, a checkpoint's load, a hub
# or Hugging Face `from_pretrained`, a torchvision model builder
BUILDS = re.compile(r"torch/nn/modules/.+:(\w+\.)?__init__$|torch/serialization\.py:|torch/hub\.py:|"
                    r":(\w+\.)?(from_pretrained|load_state_dict)$|torchvision/models/.+:(?!.*forward)")
IMPORTS, BUILDING = "imports", "model construction"
# a line the loop's samples start their path at (sections/line_paths.py: `for x in loader`, `y = step(x)`) is the
# loop's own where the loop comes back to it (two runs of samples or more, other lines between) or it holds this share
# of the loop's time: one line run on once past the start (a build() that straddles it) does neither, unless long
LOOP_LINE_SHARE = 0.1


def kind_of(frames: list[Frame], stack: tuple[int, ...]) -> str | None:
    """What set-up a stack is doing (IMPORTS, BUILDING), or None for the program's own work. An import anywhere in
    the stack is the import's (a module's body that builds a model at import time is still its import)."""
    if any(frames[f].file.startswith(IMPORT_MACHINERY) for f in stack):
        return IMPORTS
    if any(BUILDS.search(f"{frames[f].file}:{frames[f].function}") for f in stack if not frames[f].in_program):
        return BUILDING
    return None


def kinds(frames: list[Frame], stacks: list[tuple[int, ...]]) -> np.ndarray:
    """kind_of for every stack (an index into stacks): object array of IMPORTS, BUILDING or None."""
    return np.array([kind_of(frames, k) for k in stacks], dtype=object)


def setup_end(samples: pd.DataFrame, kind: np.ndarray) -> int | None:
    """Where the main thread's set-up ends (trace ns): the end of the sample at which the running sum of +set-up and
    -other time is highest (see the module's docstring); None when no sample is set-up. samples: one thread's, with
    start_ns, end_ns and stack (an index into kind)."""
    if samples.empty:
        return None
    s = samples.sort_values("start_ns")
    ns = (s["end_ns"] - s["start_ns"]).to_numpy(np.int64)
    is_setup = np.array([kind[k] is not None for k in s["stack"].to_numpy()], bool)
    if not is_setup.any():
        return None
    running = np.cumsum(np.where(is_setup, ns, -ns))
    best = int(np.argmax(running))
    return int(s["end_ns"].to_numpy()[best]) if running[best] > 0 else None


def in_loop(before: np.ndarray, loop: pd.DataFrame, loop_ns: np.ndarray, stacks: list[tuple[int, ...]],
            frames: list[Frame], loop_frame) -> np.ndarray:
    """For each sample before the loop's start (before: their stacks, indices into stacks), whether its stack passes
    through one of the loop's lines: the lines the loop's samples (loop: with start_ns and stack; loop_ns: their
    time) start their path at (loop_frame: a stack's frame of it, -1 without), come back to or spend
    LOOP_LINE_SHARE of the loop's time at."""
    def key(f: int) -> tuple[str, int, str]:
        return frames[f].file, frames[f].line, frames[f].function

    order = np.argsort(loop["start_ns"].to_numpy(), kind="stable")
    weight: dict[tuple[str, int, str], float] = {}
    runs: dict[tuple[str, int, str], int] = {}
    last = None
    for k, w in zip(loop["stack"].to_numpy()[order], np.asarray(loop_ns)[order]):
        f = loop_frame(int(k))
        if f < 0 or frames[f].line <= 0:  # no line of the program, or a call of a torch.profiler trace (no line)
            continue
        line = key(f)
        weight[line] = weight.get(line, 0.0) + float(w)
        if line != last:
            runs[line] = runs.get(line, 0) + 1
            last = line
    total = float(np.sum(loop_ns))
    lines = {k for k, w in weight.items() if runs[k] >= 2 or (total > 0 and w >= LOOP_LINE_SHARE * total)}
    return np.array([any(key(f) in lines for f in stacks[int(k)] if frames[f].in_program) for k in before], bool)
