"""The parts of a Timeline a fix acts on, found by what a finding names: the host work at a line of the program (its
Python stacks), inside an NVTX range, or unranged between the model's calls; the CUDA calls at a line; the copies of
one direction; the synchronising calls; the thread's waits."""
from __future__ import annotations

import numpy as np

from ..sections.timeline import Timeline

SIDE_BYTES = 64 * 1024  # a copy this large carries a batch's input or output, not a scalar (as sections/code_lines)


def at_line(t: Timeline, place: str) -> np.ndarray:
    """The samples (a bool per sample) of the work at a line: the samples whose loop's line or innermost line of the
    program is there (a loop's line stands for all the work it calls: `postprocess(x)` and the numpy inside)."""
    if t.samples is None or t.code is None:
        return np.zeros(0, bool)
    stacks = t.samples["stack"].to_numpy()
    hits = {}
    for k in np.unique(stacks):
        loop, leaf, _ = t.code.places(int(k))
        hits[int(k)] = place in (loop, leaf)
    return np.array([hits[int(k)] for k in stacks], bool)


def of_role(t: Timeline, roles: tuple[str, ...]) -> np.ndarray:
    """The samples (a bool per sample) whose work has one of these roles (sections/roles.py)."""
    if t.samples is None or t.code is None:
        return np.zeros(0, bool)
    stacks = t.samples["stack"].to_numpy()
    role = {int(k): t.code.places(int(k))[2] for k in np.unique(stacks)}
    return np.array([role[int(k)] in roles for k in stacks], bool)


def sampled_work(t: Timeline, samples: np.ndarray) -> np.ndarray:
    """Each gap's own work inside the time the chosen samples stand for."""
    if t.samples is None or not samples.any():
        return np.zeros(t.gap_start.size, np.int64)
    s = t.samples[samples]
    return t.cpu_within(s["start_ns"].to_numpy(), s["end_ns"].to_numpy())


def sampled_calls(t: Timeline, samples: np.ndarray) -> np.ndarray:
    """The calls made in the time the chosen samples stand for."""
    if t.samples is None or not samples.any():
        return np.zeros(t.call_start.size, bool)
    s = t.samples[samples]
    return t.calls_within(s["start_ns"].to_numpy(), s["end_ns"].to_numpy())


def in_range(t: Timeline, name: str) -> np.ndarray:
    """Each gap's own work inside the thread's user ranges of this (family) name."""
    r = t.ranges[t.ranges["name"] == name] if len(t.ranges) else t.ranges
    if r.empty:
        return np.zeros(t.gap_start.size, np.int64)
    return t.cpu_within(r["start_ns"].to_numpy(), r["end_ns"].to_numpy())


def unranged_long(t: Timeline, min_gap_ns: int) -> np.ndarray:
    """The thread's own work outside user ranges in gaps at least min_gap_ns long: the CPU work between the model's
    calls that is no launch overhead (the idle attribution's `cpu` cause)."""
    work = t.cpu_ns.copy()
    if len(t.ranges):
        work = work - t.cpu_within(t.ranges["start_ns"].to_numpy(), t.ranges["end_ns"].to_numpy())
    return np.where(t.gap_ns >= min_gap_ns, np.maximum(work, 0), 0)


def copies(t: Timeline, direction: str, memory: str | None = None) -> np.ndarray:
    """The copies (a bool per operation) of a direction (HtoD, DtoH), of one host memory kind where given (Pageable,
    Pinned)."""
    mask = (t.op_kind == "copy") & (t.op_copy == direction)
    if memory is not None:
        mask &= t.op_host_memory == memory
    return mask


def calls_of(t: Timeline, ops: np.ndarray) -> np.ndarray:
    """The calls (a bool per call) that issued these operations."""
    out = np.zeros(t.call_start.size, bool)
    c = t.op_call[ops]
    out[c[c >= 0]] = True
    return out


def waiting_syncs(t: Timeline) -> np.ndarray:
    """The synchronising calls that waited for the GPU in the capture, and the scalar reads' copies that did (a copy
    under SIDE_BYTES into pageable memory returns once the GPU has run everything before it: `.item()`, `.cpu()` of a
    few values)."""
    small = copies(t, "DtoH") & (t.op_bytes < SIDE_BYTES)
    reads = calls_of(t, small) & (t.call_kind == "copy")
    return ((t.call_kind == "sync") | reads) & (t.call_awaits >= 0)


def per_iteration(t: Timeline, ns: float) -> float:
    """ns over the span as ns an iteration."""
    return ns / t.iterations if t.iterations else ns



def beside_copies(t: Timeline, direction: str) -> np.ndarray:
    """Each gap's own work next to a batch's copy of that direction: between the last launch or copy before the call
    that copies the input in and that call (the input's preparation); between the call that copies the output out and
    the next launch or copy (its handling, past the sync that waits for it); zero elsewhere."""
    big = copies(t, direction) & (t.op_bytes >= SIDE_BYTES)
    calls = np.unique(t.op_call[big & (t.op_call >= 0)])
    out = np.zeros(t.gap_start.size, np.int64)
    if calls.size == 0:
        return out
    issuing = np.flatnonzero(np.isin(t.call_kind, ("launch", "copy", "graph")))
    mark = np.zeros(t.gap_start.size, bool)
    for c in calls:
        i = int(np.searchsorted(issuing, c))
        if direction == "HtoD":  # gaps after the previous issuing call, up to this one (gap c is before call c)
            first = int(issuing[i - 1]) + 1 if i > 0 else 0
            mark[first:c + 1] = True
        else:  # gaps after this call, up to the next issuing call (gap c + 1 is after call c)
            nxt = int(issuing[i + 1]) if i + 1 < issuing.size else t.call_start.size
            mark[c + 1:nxt + 1] = True
    out[mark] = t.cpu_ns[mark]
    return out


def loop_statements(t: Timeline) -> dict[int, str | None]:
    """Each sampled stack's statement in the loop's body: the first frame of the program's own code past the frames
    every stack of the span shares (the module's line that calls main(), the loop's own line): `tokenize(batch)` for
    all the tokenizer's work below it."""
    if t.samples is None or t.code is None:
        return {}
    st = t.code.stacks
    ids = [int(k) for k in np.unique(t.samples["stack"].to_numpy())]
    own = {k: [f for f in st.stacks[k] if st.frames[f].in_program] for k in ids}
    paths = [p for p in own.values() if p]
    shared = 0
    while paths and all(len(p) > shared + 1 and p[shared] == paths[0][shared] for p in paths):
        shared += 1
    return {k: (st.frames[p[shared]].place if len(p) > shared else None) for k, p in own.items()}


def at_statement(t: Timeline, place: str) -> np.ndarray:
    """The samples (a bool per sample) under the loop's statement that holds the line: the statement of most of the
    line's own samples (the innermost line of the program there, or the statement itself)."""
    if t.samples is None or t.code is None:
        return np.zeros(0, bool)
    stmt = loop_statements(t)
    stacks = t.samples["stack"].to_numpy()
    leaf = {k: t.code.places(k)[1] for k in stmt}
    mine = [stmt[int(k)] for k in stacks if leaf[int(k)] == place or stmt[int(k)] == place]
    if not mine:
        return np.zeros(stacks.size, bool)
    top = max(set(mine), key=mine.count)
    return np.array([stmt[int(k)] == top for k in stacks], bool)
