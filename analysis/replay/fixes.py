"""The shapes of the fixes the findings advise, as Edits of a Timeline: each with the most it can buy (`high`) and the
least (`low`), and what the two assume, so that a prediction is a range whose ends are said.

    move_off_thread   work leaves the launching thread for workers (DataLoader workers, an output pipeline, a thread
                      pool); they set a pace of their own, slower where they share the memory bus (low)
    pinned            copies run from pinned memory at the link's speed; overlapped on a side stream, the host no longer
                      waits for them
    drop              calls that are gone with their GPU work (per-element reads on the host, weights kept resident)
    no_wait           blocking calls that no longer wait (a timing sync removed, an asynchronous copy)
    remove            host work that is gone (a sleep, memory mapping, an accumulation's copying)
    graph             the model's launches replayed as one CUDA graph: the launch calls cost nothing (low), and the
                      Python between them goes too (high)

The figures behind the assumptions were measured on this project's programs and are named where they are defined."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .edits import Edit
from ..sections.timeline import Timeline

# The pace of work moved to worker processes, as a share of one core each (low, high): work that streams big arrays
# (little CPU time a byte of the batch's data) shares the memory bus and keeps 25-50% of a core per worker where 6-8
# run (seg_numpy_post_mpfix on an H100: 6 spawned workers of numpy softmax at 4.3-4.7 batches/s, 0.34 s of work a
# batch on the loop's thread; seg_logits_fixed and seg_cpu_argmax_fixed on the H200: 8 workers at 4.4-5.6 batches/s
# of 0.52-0.74 s; docs/benchmarks.md); work that computes on little data (a tokenizer, Python) keeps 60-100%
STREAMING_SHARE = (0.25, 0.5)
COMPUTING_SHARE = (0.6, 1.0)
STREAMING_NS_PER_BYTE = 10.0  # below this much work a byte of the batch's data, the work streams memory
DEFAULT_WORKERS = 8      # the workers the advice names (DataLoader num_workers=8, OutputPipeline's default)
SPARE_CORES = 2          # cores left to the launching thread and the rest of the program
HANDOFF_GBPS = 2.5       # a hand-off through a queue copies the data once more into fresh shared memory (low end;
                         # seg_numpy_post_mpfix: 176 MB a batch, 37 ms of it in posix_fallocate alone)
PINNED_SHARE_LOW = 0.8   # a pinned copy at this share of the link at the low end (H200: 53-55 GB/s of a 63 GB/s x16)
# an input pinned for its copy is first copied into pinned memory on a thread of its own (DataLoader's pin_memory
# thread, prefetch's): that thread's pace bounds the loop. The fixed programs ran at 3.3 GB/s of input (ct_volume_segment
# with pin_memory=True, 75.5 MB a batch at 44 batches/s) and 3.9 GB/s (image_loop with prefetch, 154 MB at 25.5/s) on
# the H200: the low end pins at 3 GB/s; the high end pays no such copy (the producers write into pinned buffers)
PIN_GBPS_LOW = 3.0
# the workers' start, added to the whole loop: 8 forked output workers took 157 ms (hf_embed_fixed on the H200, issue
# 37; high end), a DataLoader's first batches up to a second more (low end); spawned workers that import torch again
# take seconds more (seg_numpy_post_mpfix: 7.5 s, issue 48), which the advice's forked workers do not
WORKERS_START_NS = (150_000_000, 1_000_000_000)


@dataclass(frozen=True)
class Fix:
    """A fix as the replay makes it: the most (high) and least (low) it can buy as Edits, what the two assume, and
    the set-up it adds to the whole loop (ns: at the high end, at the low end)."""
    high: Edit
    low: Edit
    assumptions: tuple[str, ...] = ()
    setup_ns: tuple[float, float] = (0.0, 0.0)
    on_gpu: Edit | None = None  # the other route the advice names: the work done on the GPU, gone from the host

    def combine(self, other: "Fix") -> "Fix":
        """Both fixes made."""
        # the GPU route of both: each one's GPU route where it has one, its own (high) fix where it has none
        gpu = None if self.on_gpu is None and other.on_gpu is None else \
            (self.on_gpu or self.high).combine(other.on_gpu or other.high)
        return Fix(self.high.combine(other.high), self.low.combine(other.low),
                   tuple(dict.fromkeys(self.assumptions + other.assumptions)),
                   (max(self.setup_ns[0], other.setup_ns[0]), max(self.setup_ns[1], other.setup_ns[1])), gpu)


@dataclass(frozen=True)
class NoFigure:
    """Why the trace cannot say what a fix buys (said instead of a number)."""
    reason: str


def workers_for(t: Timeline, asked: int | None = None) -> int:
    """The workers the work can have: those asked (DEFAULT_WORKERS), at most the capture machine's cores less
    SPARE_CORES."""
    n = asked or DEFAULT_WORKERS
    return max(1, min(n, (t.cores or n + SPARE_CORES) - SPARE_CORES))


def move_off_thread(t: Timeline, work: np.ndarray, where: str, data_bytes: float = 0.0, handoff: bool = False,
                    workers: int | None = None, processes: bool = True) -> Fix:
    """The work (ns per gap) leaves the launching thread for `workers` workers: their pace bounds the loop, each at a
    share of a core that depends on whether the work streams its data (data_bytes: the batch's copies over the span;
    STREAMING_NS_PER_BYTE); handoff: at the low end a queue copies the data once more into shared memory on the
    launching thread."""
    n = workers or workers_for(t)
    total = float(work.sum())
    streaming = bool(data_bytes) and total / data_bytes < STREAMING_NS_PER_BYTE
    low_share, high_share = STREAMING_SHARE if streaming else COMPUTING_SHARE
    copy = np.zeros(t.gap_start.size) if total <= 0 or not handoff else work / total * (data_bytes / HANDOFF_GBPS)
    high = Edit(host_removed=work, pace_ns=total / (n * high_share))
    low = Edit(host_removed=work, host_added=copy if handoff and data_bytes else None, pace_ns=total / (n * low_share))
    kind = "streams the batch's data" if streaming else "computes"
    said = [f"the work moves to {n} {where}; it {kind}, so each keeps {low_share:.0%} (low) to {high_share:.0%} "
            "(high) of a core"]
    if handoff and data_bytes:
        said.append(f"handing them the data through a queue copies it once more at {HANDOFF_GBPS:g} GB/s (low end)")
    return Fix(high, low, tuple(said), WORKERS_START_NS if processes else (0.0, 0.0), Edit(host_removed=work))


def pinned(t: Timeline, ops: np.ndarray, overlap: bool, link_gbps: float | None) -> Fix | NoFigure:
    """The copies (a bool per operation) from pinned memory at the link's speed (PINNED_SHARE_LOW of it at the low
    end). A pageable copy's call stages the data through a bounce buffer at the copy's own pace: from pinned memory it
    takes as much less time as the copy does (low end). overlap: at the high end on a side stream, the host not
    waiting for them and their calls costing it a launch (the low end keeps the wait)."""
    if not ops.any():
        return NoFigure("the replayed iterations hold none of these copies")
    if not link_gbps:
        return NoFigure("the host link's speed is unknown (pass --link-gbps)")
    now = (t.op_end - t.op_start).astype(float)
    at = t.op_bytes / link_gbps  # bytes / (GB/s) = ns
    high_ns = np.where(ops, np.minimum(now, at), now)
    low_ns = np.where(ops, np.minimum(now, at / PINNED_SHARE_LOW), now)
    calls = np.zeros(t.call_start.size, bool)
    c = t.op_call[ops & (t.op_call >= 0)]
    calls[c] = True
    own = (t.call_end - t.call_start).astype(float)
    staged = np.full(t.call_start.size, np.nan)  # each copy call's own time, shrunk with its copy's
    ratio = np.ones(t.op_start.size)
    ratio[ops] = low_ns[ops] / np.maximum(now[ops], 1.0)
    staged[c] = own[c] * ratio[ops & (t.op_call >= 0)]
    inputs = float(t.op_bytes[ops & (t.op_copy == "HtoD")].sum())  # pinned on a thread of their own first
    high = Edit(op_ns=high_ns, side_stream=ops if overlap else None, no_wait=calls if overlap else None,
                free_calls=calls if overlap else None, call_ns=staged)
    low = Edit(op_ns=low_ns, call_ns=staged, pace_ns=inputs / PIN_GBPS_LOW)
    said = [f"pinned copies at {PINNED_SHARE_LOW:.0%} (low) to 100% (high) of the {link_gbps:.0f} GB/s link"]
    if inputs:
        said.append(f"at the low end the input is pinned first on a thread of its own at {PIN_GBPS_LOW:g} GB/s; at "
                    "the high end its producers write it into pinned buffers")
    if overlap:
        said.append("at the high end on a side stream, the host not waiting for them; at the low end still waited for")
    return Fix(high, low, tuple(said))


def drop(calls: np.ndarray, said: str) -> Fix:
    """Calls that are gone with their GPU work, at both ends."""
    e = Edit(dropped=calls)
    return Fix(e, e, (said,))


def no_wait(calls: np.ndarray, said: str) -> Fix:
    """Blocking calls that no longer wait, at both ends."""
    e = Edit(no_wait=calls)
    return Fix(e, e, (said,))


def remove(work: np.ndarray, said: str = "", low_share: float = 1.0) -> Fix:
    """Host work (ns per gap) that is gone: all of it at the high end, low_share of it at the low end."""
    return Fix(Edit(host_removed=work), Edit(host_removed=work * low_share), (said,) if said else ())


def graph(t: Timeline, launches: np.ndarray, between: np.ndarray) -> Fix:
    """The launch calls (a bool per call) replayed as one CUDA graph: they cost the host nothing (both ends), and at
    the high end the host work between them (ns per gap) goes too."""
    low = Edit(free_calls=launches)
    high = replace(low, host_removed=between)
    return Fix(high, low, ("the model's launches replayed as one CUDA graph: its launch calls cost nothing; at the "
                           "high end the Python between them goes too",))

