"""Where the GPU's idle time went: each idle nanosecond of a device is given to one cause, by what its launching
thread was doing at that instant, so no time is counted twice.

    GPU      ####........####..####..........######
    thread   [launch]  poll()  [sync][Python]  [ 'process output' range ]
                        ^input  ^host-sync      ^cpu-range (deepest user NVTX range)

Order of precedence, first match wins (common/idle_causes.py declares the causes, in this order, with their names,
rules, labels and colours; a cause declared there with `calls` claims the idle time in those OS calls of the launching
threads at its place in the order, with no code here):
  setup       the thread is inside a one-time CUDA set-up call (load/calls.setup_calls: the context, module loading,
              a first launch that loads its module, the caching allocator's cudaMalloc/cudaFree, stream creation),
              in a user range named `warmup` or not: set-up, never the loop's CPU work
  comm-wait   the thread is inside an MPI call (nsys --trace=mpi); a user range named after one (MPI_Send) or after a
              collective (all_reduce, nccl...) counts so too, in place of cpu-range
  mapping     a thread of the launching process is mapping memory (mmap, munmap, fallocate, ...)
  sleep       the thread sleeps (nanosleep, clock_nanosleep, usleep: Python's time.sleep), or the scheduler has it off
              the CPU outside any call that says why (nsys --cpuctxsw): not working (subject: the deepest user range)
  drain       the thread is blocked waiting (as for input) after its last step has ended: no input is wanted any more,
              so it waits for the output side (its workers' backlog, a drain); subject: the deepest user range
  input       the thread is blocked waiting for other threads or processes (poll, futex, read, ...), outside CUDA calls;
              or, outside user ranges, the DataLoader's pin-memory thread waits for a batch its workers still make
  cpu-range   a long gap (>= min_gap) inside a user NVTX range (the deepest one; steps and PyTorch operator ranges
              are not phases)
  host-sync   the gap began while the thread waited in a synchronising CUDA call (it drained the GPU's queue): a long
              gap's first turnaround, a short gap (< min_gap) whole
  launch      a short gap (< min_gap) between kernels while the thread issues work
  cpu         a long gap with the thread busy outside any user range (subject: the PyTorch operator it was in)
Columns of the result: cause, subject, idle_ns, device.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..common import idle_causes
from ..common.idle_causes import (COMM_WAIT, CPU, CPU_RANGE, DRAIN, HOST_SYNC, INPUT, LAUNCH,
                                  MAPPING, SETUP, SLEEP)
from ..common.interval_sets import Union, intersect, overlapped, subtract, total
from ..common.intervals import Coverage, SpilledCoverage, gaps, union
from . import cpu_work, idle_summary
from .idle_ranges import (Nesting, family_time, phases, range_edges, ranked_times,
                          steps_end, thread_ranges)
from .idle_calls import calls_matching, named_times, time_by_name
from .idle_syncs import idle_after_sync, sync_arrays, sync_turnaround
from ..load.frames import pid_of
from ..common.spill import Frames

WAIT_CALLS = re.compile(r"^(poll|ppoll|select|pselect6?|epoll_wait|epoll_pwait2?|recv|recvfrom|recvmsg|recvmmsg|read|"
                        r"readv|futex|sem_wait|sem_timedwait|sem_clockwait|pthread_cond_wait|pthread_cond_timedwait|"
                        r"pthread_cond_clockwait|pthread_join|pthread_mutex_lock|pthread_mutex_timedlock|"
                        r"pthread_rwlock_(rd|wr)lock|waitpid|wait4|waitid|msgrcv|mq_receive|mq_timedreceive|sigwait\w*)$")
SLEEP_CALLS = re.compile(r"^(nanosleep|clock_nanosleep|usleep|sleep|pause)$")  # off the CPU by choice, not working
OFF_CPU = re.compile(r"^\(off CPU\)$")  # trace.host.off_cpu: the scheduler took the thread off, outside any traced call
MAPPING_CALLS = re.compile(r"^(mmap|mmap64|munmap|mremap|madvise|brk|posix_fallocate|posix_fallocate64|fallocate|"
                           r"shm_open|ftruncate)$")
LOADER_RANGE = re.compile(r"DataLoader|DataLoaderIter|__next__")
# communication: the thread is inside an MPI call (nsys --trace=mpi) or a range named after one or after a collective
COMM_CALLS = re.compile(r"^P?MPI_\w+$")
COMM_RANGE = re.compile(r"^P?MPI_\w+|^nccl\w+|\b(all_?reduce|all_?gather|reduce_scatter|broadcast|barrier)\b", re.I)
COLUMNS = ["cause", "subject", "idle_ns", "device"]


def _every_thread(u: Union, rows: pd.DataFrame, mine: pd.DataFrame) -> Union:
    """u (the union of rows: calls) cut to the instants when every launching thread that made such a call in the
    segment (mine: their calls) is in one: with several launching threads (a server's request threads taking turns
    at a lock), one waits while another launches, and that instant is the launch's, not a wait's."""
    threads = pd.unique(mine["global_tid"]) if len(mine) else []
    if len(threads) < 2:
        return u
    for t in threads:
        own = rows[rows["global_tid"] == t]
        u = intersect(u, union(own["start_ns"].to_numpy(), own["end_ns"].to_numpy()))
    return u


def attribute(busy: Coverage | SpilledCoverage, window: tuple[int, int], threads, osrt: pd.DataFrame | Frames,
              nvtx: pd.DataFrame, sync_calls: pd.DataFrame, cuda_calls: pd.DataFrame, step_regex: str | None,
              min_gap_ns: int, device: int = 0, loader: dict | None = None, samples: pd.DataFrame | None = None,
              setup_calls: pd.DataFrame | None = None) -> tuple[pd.DataFrame, idle_summary.IdleDevice]:
    """The idle time of one device by cause (see the module doc), and the details each rule quotes.

    loader: {"pin": tids of the DataLoader's pin-memory threads, "workers": tids of its worker processes' main
    threads}; PyTorch's pin-memory thread waits for the workers, while the launching thread's own wait for it is a
    timed lock nsys does not trace.

    Each instant is judged on its own, so the window is cut into time segments of SEGMENT_INTERVALS busy intervals,
    each attributed alone and the parts added up: a long capture's tens of millions of idle intervals are never all
    in memory at once."""
    shared = _Shared.of(threads, osrt, nvtx, sync_calls, cuda_calls, step_regex, min_gap_ns, loader or {}, samples,
                        setup_calls)
    parts = [_segment(shared, *busy.slice(i, i + SEGMENT_INTERVALS), lo, hi) for i, lo, hi in _segments(busy, window)]
    return _combine(parts, device)


SEGMENT_INTERVALS = 1 << 20  # busy intervals per segment of attribute(): about 50 MB of idle-time arrays


def gap_causes(spans, threads, osrt: pd.DataFrame | Frames, nvtx: pd.DataFrame, sync_calls: pd.DataFrame,
               cuda_calls: pd.DataFrame, step_regex: str | None, min_gap_ns: int,
               loader: dict | None = None, setup_calls: pd.DataFrame | None = None) -> list[tuple[str, str | None]]:
    """(cause, subject) that holds most of each idle span (start_ns, end_ns): the same rules as attribute(), applied
    to one gap at a time, for the few gaps a chart draws."""
    shared = _Shared.of(threads, osrt, nvtx, sync_calls, cuda_calls, step_regex, min_gap_ns, loader or {},
                        setup_calls=setup_calls)
    none = np.zeros(0, np.int64)
    return [_dominant(_segment(shared, none, none, int(lo), int(hi))) for lo, hi in spans]


def _dominant(part: dict) -> tuple[str, str | None]:
    ranges = ranked_times(part["range_time"])
    held = {(SETUP.name, None): part["setup"], (COMM_WAIT.name, None): part["comm"], (SLEEP.name, None): part["sleep"],
            (INPUT.name, None): part["input"] + part["loader"], (DRAIN.name, None): part["drain"],
            (MAPPING.name, None): part["mapping"],
            **{(c.name, None): part[_added_key(c)] for c in idle_causes.added()},
            (HOST_SYNC.name, None): part["sync"], (LAUNCH.name, None): part["launch"], (CPU.name, None): part["cpu"]}
    if len(ranges):
        held[(CPU_RANGE.name, str(ranges.index[0]))] = int(ranges.iloc[0])
    return max(held, key=held.get)


@dataclass(frozen=True)
class _Shared:
    """What every time segment reads: the OS calls, the threads' CUDA calls, ranges and synchronizations."""
    threads: list
    pids: list
    loader: dict
    min_gap_ns: int
    osrt: pd.DataFrame | Frames  # the waiting calls (os_calls.wait_calls), or in temporary files
    in_cuda: Union        # OS calls made inside a CUDA call belong to that call
    ranges: Nesting       # phases(): the ranges that mark the program's phases
    in_ranges: Union
    op_ranges: Nesting    # PyTorch operator ranges (emit_nvtx): which op the thread was in
    sync_ends: np.ndarray  # the threads' synchronize calls' ends, sorted, and their starts in the same order
    sync_starts: np.ndarray
    edges: np.ndarray     # range_edges()
    sample_times: np.ndarray  # the threads' CPU samples (sections/cpu_work.owners), sorted, and each one's owner
    sample_keys: np.ndarray
    steps_end: int | None  # where the threads' last step range ends (None: no steps): later waits are the drain's
    setup: Union = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # the threads' one-time CUDA set-up calls
    setup_rows: pd.DataFrame | None = None                           # and the calls themselves (their names)

    @classmethod
    def of(cls, threads, osrt, nvtx, sync_calls, cuda_calls, step_regex, min_gap_ns, loader, samples=None,
           setup_calls=None) -> "_Shared":
        mine, operator = thread_ranges(nvtx, threads)
        ranges = phases(mine, operator, step_regex)
        setup_rows = _thread_rows(setup_calls, threads) if setup_calls is not None else None
        return cls(threads=list(threads), pids=[pid_of(t) for t in threads], loader=loader, min_gap_ns=min_gap_ns,
                   osrt=osrt, in_cuda=_thread_union(cuda_calls, threads), ranges=Nesting.of(ranges),
                   in_ranges=union(ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()),
                   op_ranges=Nesting.of(mine[operator]),
                   **sync_arrays(_thread_rows(sync_calls, threads)),
                   edges=range_edges(mine, operator), **_sample_arrays(samples, threads),
                   steps_end=steps_end(mine, step_regex),
                   setup=_thread_union(setup_rows, threads) if setup_rows is not None else
                   (np.zeros(0, np.int64), np.zeros(0, np.int64)), setup_rows=setup_rows)


def _segments(busy: Coverage | SpilledCoverage, window: tuple[int, int]):
    """(first busy interval, start, end) of each time segment: cut at a busy interval's start, so that every idle
    interval lies in one segment whole."""
    lo, hi = window
    firsts = list(range(0, max(busy.size, 1), SEGMENT_INTERVALS))
    cuts = [lo, *(min(max(busy.start_at(i), lo), hi) for i in firsts[1:]), hi]
    return [(i, cuts[k], cuts[k + 1]) for k, i in enumerate(firsts)]


def _segment(sh: _Shared, bs: np.ndarray, be: np.ndarray, lo, hi) -> dict:
    """One time segment's idle time by cause: its totals and its per-name and per-range times, not yet ranked."""
    holes = gaps(bs, be, lo, hi, 0)
    idle: Union = (holes["start_ns"].to_numpy(), holes["end_ns"].to_numpy())
    is_long = holes["duration_ns"].to_numpy() >= sh.min_gap_ns
    osrt = _touching(sh.osrt, idle, lo, hi)
    mine = osrt[osrt["global_tid"].isin(sh.threads)] if len(osrt) else osrt
    waits, wait_rows = calls_matching(mine, WAIT_CALLS)
    maps, map_rows = calls_matching(_process_calls(sh, osrt), MAPPING_CALLS)
    comm, comm_rows = calls_matching(mine, COMM_CALLS)
    sleeps, _ = calls_matching(mine, SLEEP_CALLS)
    off, _ = calls_matching(mine, OFF_CPU)
    waits = subtract(_every_thread(waits, wait_rows, mine), sh.in_cuda)
    # off the CPU outside any call that says why (a wait, a mapping, a CUDA call): asleep all the same
    off = subtract(subtract(subtract(off, sh.in_cuda), waits), maps)
    sleeps = union(*(np.concatenate(x) for x in zip(sleeps, off)))
    waited = idle_after_sync(idle, sh.sync_ends, sh.edges)
    after_sync = sync_turnaround(waited, sh.sync_ends, sh.sync_starts)  # the sync's cost; past it, the thread's next work
    # a short hole no mapping, wait or return from a sync overlaps is launch time whatever else holds: the rules below
    # run on the long holes and the few short ones that meet those (millions of holes between back-to-back kernels)
    added = {name: calls_matching(mine, calls)[0] for name, calls in idle_causes.added_calls()}
    plain = ~is_long & ~overlapped(idle, union(*(np.concatenate(x) for x in zip(maps, waits, after_sync, comm,
                                                                                sleeps, sh.setup, *added.values()))))
    judged: Union = (idle[0][~plain], idle[1][~plain])

    # the causes a thread's calls show, in their order of precedence: each takes its calls' part of what is left
    by_calls = {SETUP.name: sh.setup, COMM_WAIT.name: comm, MAPPING.name: maps, SLEEP.name: sleeps, INPUT.name: waits,
                **added}
    claimed, rest = _claimed(judged, by_calls)
    setup_u = claimed[SETUP.name]
    comm_u, mapping_u, sleep_u, input_u = (claimed[c.name] for c in (COMM_WAIT, MAPPING, SLEEP, INPUT))
    drain_u, input_u = _after(input_u, sh.steps_end), _before(input_u, sh.steps_end)
    rest_long = intersect(rest, (idle[0][is_long], idle[1][is_long]))
    rest_short = subtract(rest, rest_long)
    range_u, rest_long = intersect(rest_long, sh.in_ranges), subtract(rest_long, sh.in_ranges)
    starved = subtract(_loader_starved(osrt, sh.loader), sh.in_cuda)
    loader_u, rest_long = intersect(rest_long, starved), subtract(rest_long, starved)
    sync_long, rest_long = intersect(rest_long, after_sync), subtract(rest_long, after_sync)
    # a short hole that follows a sync is the sync's whole: the thread reads a value, then issues the next small piece
    # (a per-element .item() loop); it is not launch overhead, and no CUDA graph can hold a loop that syncs
    sync_short, launch_u = intersect(rest_short, waited), subtract(rest_short, waited)
    serialised = intersect(rest_long, waited)  # CPU work the GPU waited for because a sync had emptied its queue
    cpu_samples, range_samples = _sampled(sh, rest_long), _sampled(sh, range_u)
    return {"setup": total(setup_u), "setup_calls": time_by_name(setup_u, sh.setup_rows) if sh.setup_rows is not None
            else pd.Series(dtype="int64"),
            "comm": total(comm_u), "comm_calls": time_by_name(comm_u, comm_rows),
            "sleep": total(sleep_u), "sleep_ranges": family_time(sleep_u, sh.ranges, lo, hi),
            "input": total(input_u), "loader": total(loader_u), "drain": total(drain_u),
            "drain_ranges": family_time(drain_u, sh.ranges, lo, hi), "mapping": total(mapping_u),
            "sync": total(sync_long) + total(sync_short),
            "launch": total(launch_u) + int((idle[1][plain] - idle[0][plain]).sum()), "cpu": total(rest_long),
            "cpu_after_sync": total(serialised),
            "idle": total(idle), "holes": int(len(holes)), "short": int((~is_long).sum()),
            "after_sync": int(after_sync[0].size),
            "input_ranges": family_time(input_u, sh.ranges, lo, hi),
            "range_time": family_time(range_u, sh.ranges, lo, hi),
            "cpu_ops": family_time(rest_long, sh.op_ranges, lo, hi),
            "cpu_samples": cpu_samples, "range_samples": range_samples,
            "input_calls": time_by_name(input_u, wait_rows), "mapping_calls": time_by_name(mapping_u, map_rows),
            **{_added_key(c): total(claimed[c.name]) for c in idle_causes.added()}}


def _process_calls(sh: _Shared, osrt: pd.DataFrame) -> pd.DataFrame:
    """The calls of any thread of the launching process, for mapping: a queue's feeder thread maps shared memory while
    the launching thread waits for it (not the DataLoader's pin-memory thread: its mapping is the input hand-off, which
    the input cause explains)."""
    process = osrt[np.isin(pid_of(osrt["global_tid"].to_numpy()), sh.pids)] if len(osrt) else osrt
    return process[~process["global_tid"].isin(list(sh.loader.get("pin", ())))] if len(process) else process


def _claimed(judged: Union, by_calls: dict[str, Union]) -> tuple[dict[str, Union], Union]:
    """Each cause shown by calls takes its calls' part of what is left, in the causes' order of precedence; and what
    none of them claimed."""
    claimed, rest = {}, judged
    for cause in idle_causes.CAUSES:
        if cause.name in by_calls:
            claimed[cause.name], rest = intersect(rest, by_calls[cause.name]), subtract(rest, by_calls[cause.name])
    return claimed, rest


def _added_key(cause) -> str:
    """A declared cause's total in a segment's part (a key no built-in total has)."""
    return f"cause:{cause.name}"


def _after(u: Union, t: int | None) -> Union:
    """The part of u from t on (none when t is None)."""
    if t is None:
        return u[0][:0], u[1][:0]
    return intersect(u, (np.array([t], np.int64), np.array([np.iinfo(np.int64).max], np.int64)))


def _before(u: Union, t: int | None) -> Union:
    """The part of u before t (all of it when t is None)."""
    return u if t is None else subtract(u, _after(u, t))


def _touching(osrt: pd.DataFrame | Frames, idle: Union, lo, hi) -> pd.DataFrame:
    """The calls that touch this segment's idle time (millions of rows in long traces: selected once per segment;
    in temporary files, spill.Frames, only the parts spanning the segment are read)."""
    if isinstance(osrt, Frames):
        osrt = osrt.touching(lo, hi)
    if osrt.empty:
        return osrt
    s, e = osrt["start_ns"].to_numpy(), osrt["end_ns"].to_numpy()
    near = np.flatnonzero((s < hi) & (e > lo))
    return osrt.iloc[near[Coverage(*idle).touches(s[near], e[near])]]


def _combine(parts: list[dict], device: int) -> tuple[pd.DataFrame, idle_summary.IdleDevice]:
    """attribute()'s table and details from its segments' parts."""
    t = {k: sum(p[k] for p in parts) for k, v in parts[0].items() if isinstance(v, int)}
    summed = {k: pd.concat([p[k] for p in parts]).groupby(level=0).sum()
              for k, v in parts[0].items() if isinstance(v, pd.Series)}

    def subject(key: str, time: int) -> str | None:  # the deepest range holding most of it, if one holds half
        ranked = ranked_times(summed[key])
        return str(ranked.index[0]) if len(ranked) and ranked.iloc[0] >= 0.5 * time else None
    comm, setup = ranked_times(summed["comm_calls"]), ranked_times(summed["setup_calls"])
    rows = [(SETUP.name, str(setup.index[0]) if len(setup) else None, t["setup"]),
            (COMM_WAIT.name, str(comm.index[0]) if len(comm) else None, t["comm"]),
            (SLEEP.name, subject("sleep_ranges", t["sleep"]), t["sleep"]),
            (INPUT.name, subject("input_ranges", t["input"]), t["input"]),
            (INPUT.name, "DataLoader", t["loader"]), (DRAIN.name, subject("drain_ranges", t["drain"]), t["drain"]),
            (MAPPING.name, None, t["mapping"])]
    rows += [(c.name, None, t[_added_key(c)]) for c in idle_causes.added()]
    # a range that fetches a batch (PyTorch's profiler names it 'enumerate(DataLoader)#...__next__') is input time
    rows += [(INPUT.name if LOADER_RANGE.search(name) else COMM_WAIT.name if COMM_RANGE.search(name) else
              CPU_RANGE.name, name, int(v)) for name, v in ranked_times(summed["range_time"]).items()]
    rows += [(HOST_SYNC.name, None, t["sync"]), (LAUNCH.name, None, t["launch"]),
             (CPU.name, subject("cpu_ops", t["cpu"]), t["cpu"])]
    table = pd.DataFrame([r for r in rows if r[2] > 0], columns=COLUMNS[:3]).assign(device=device)
    details = idle_summary.IdleDevice(
        idle_ns=t["idle"], idle_intervals=t["holes"], short_idle_intervals=t["short"],
        input_calls=named_times(summed["input_calls"]), mapping_calls=named_times(summed["mapping_calls"]),
        setup_calls=named_times(summed["setup_calls"]), loader_starved_ns=t["loader"],
        after_sync_intervals=t["after_sync"], cpu_after_sync_ns=t["cpu_after_sync"],
        cpu_samples=cpu_work.summary(_split(summed["cpu_samples"])),
        range_samples=cpu_work.summary(_split(summed["range_samples"])))
    return table, details


KEY_SEP = "\t"  # kind, label and library of a sample's owner in one index value: the parts sum like the others


def _sample_arrays(samples: pd.DataFrame | None, threads) -> dict:
    if samples is None or samples.empty:
        return {"sample_times": np.zeros(0, np.int64), "sample_keys": np.zeros(0, object)}
    mine = samples[samples["global_tid"].isin(list(threads))].sort_values("time_ns", kind="stable")
    keys = (mine["kind"].astype(str) + KEY_SEP + mine["label"].astype(str) + KEY_SEP + mine["library"].astype(str))
    return {"sample_times": mine["time_ns"].to_numpy(np.int64), "sample_keys": keys.to_numpy(object)}


def _sampled(sh: _Shared, u: Union) -> pd.Series:
    """How many of the threads' CPU samples fall in u, by owner."""
    if sh.sample_times.size == 0 or u[0].size == 0:
        return pd.Series(dtype="int64")
    t = sh.sample_times
    i = np.searchsorted(u[0], t, side="right") - 1
    inside = (i >= 0) & (t < u[1][np.clip(i, 0, None)])
    return pd.Series(1, index=sh.sample_keys[inside]).groupby(level=0).sum() if inside.any() else \
        pd.Series(dtype="int64")


def _split(counts: pd.Series) -> pd.Series:
    """Counts by KEY_SEP-joined key as counts by (kind, label, library)."""
    if counts.empty:
        return pd.Series(dtype="int64", index=pd.MultiIndex.from_tuples([], names=["kind", "label", "library"]))
    return pd.Series(counts.to_numpy(), index=pd.MultiIndex.from_tuples([tuple(k.split(KEY_SEP)) for k in counts.index]))


def _loader_starved(osrt: pd.DataFrame, loader: dict) -> Union:
    """When the DataLoader's pin-memory thread waits for a batch while at least one worker is still working on one:
    the input pipeline has nothing ready. When every worker waits too, the consumer is the slow side."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if not loader.get("pin") or not loader.get("workers") or osrt.empty:
        return empty
    pin_waits, _ = calls_matching(osrt[osrt["global_tid"].isin(list(loader["pin"]))], WAIT_CALLS)
    all_wait = None
    for w in loader["workers"]:
        u, _ = calls_matching(osrt[osrt["global_tid"] == w], WAIT_CALLS)
        all_wait = u if all_wait is None else intersect(all_wait, u)
    return subtract(pin_waits, all_wait)


def _thread_rows(calls: pd.DataFrame, threads) -> pd.DataFrame:
    return calls[calls["global_tid"].isin(list(threads))] if len(calls) else calls


def _thread_union(calls: pd.DataFrame, threads) -> Union:
    rows = _thread_rows(calls, threads)
    return union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
