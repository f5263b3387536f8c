"""The parts of a Timeline a fix acts on, found by what a finding names: the host work at a line of the program (its
Python stacks), inside an NVTX range, or unranged between the model's calls; the CUDA calls at a line; the copies of
one direction; the synchronising calls; the thread's waits."""
from __future__ import annotations

import numpy as np

from nsys_transfer.analysis.sections.timeline import Timeline


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
    """The synchronising calls that waited for the GPU in the capture."""
    return (t.call_kind == "sync") & (t.call_awaits >= 0)


def per_iteration(t: Timeline, ns: float) -> float:
    """ns over the span as ns an iteration."""
    return ns / t.iterations if t.iterations else ns
