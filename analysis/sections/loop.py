"""The loop as the program runs it, read from the trace itself (issue 48): from the first iteration's start, warm-up
included, to the end of the last output's work, wherever that work ran (worker threads and processes), and how many
CUDA calls nsys traced in it (its own cost grows with them).

    [imports, model load][it 0 (warm-up)][it 1][it 2] ... [last it][GPU's last op]..[workers' last work][exit]
                         ^ start: the first iteration's launch                      ^ end

The start is the first step range's start, else the launch of the first kernel of the repeating kernel stream
(sections/steady.py), else the first GPU work's. The end is the latest of: the steady-state window's end (GPU work,
steps, the output pipeline's drain and close), and the last activity (OS runtime call, NVTX range, CPU sample) of any
thread but the launching one after the GPU's last operation, each process's cut at its exit, and the launching thread's
last Python stack sample still in the program's own code (its Python stacks beside the trace: the last batch's
post-processing, the wait for the workers). Its OS calls after the GPU's end are the interpreter's exit (munmap,
dlclose: seconds) and are left out, and so is any thread's work after that last sample (the program's clock has
stopped: multiprocessing's resource tracker, exit handlers); threads that only poll are idle, not working.

Worker processes still starting when the loop began (a spawned worker imports torch and the program's modules again
before it takes its first item: seconds) are read from the same stacks: the first sample of each in the program's own
code, past the import machinery and module bodies, is when it started working. A late start is set-up, not a backlog: verify counts the
output work after it, not the wait for it, in the steady state."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..load import kineto_stacks, python_stacks
from ..load.frames import pid_of
from ..load.span import gpu_span_estimate
from . import program, setup_lines, steady

if TYPE_CHECKING:  # the parts it reads (annotations only: those modules import the sections around this one)
    from .cpu import StepsPart
    from .gpu_part import GpuPart
    from .window import Window

IDLE_CALLS = {"poll", "ppoll", "epoll_wait", "epoll_pwait", "select", "pselect6"}  # a thread that only polls: idle
TID_BITS = 1 << 24  # nsys's globalTid: its thread part is the low 24 bits (frames.pid_of reads the process part)
EXIT_FLUSH = "CUDA profiling data flush on process exit"
SAMPLER_THREAD = "nsys-pystacks"  # the OS name of the stack sampler's thread (profiling/stack-sampler)
# the threads nsys injects into each traced process ("[NSys]", "[NSys Comms]", and "*2CommsProcesso", its comms
# processor's name cut at 15 characters, nsys 2024.2): they sample and flush to the process's end, no work of it
NSYS_THREADS = re.compile(r"^\[NSys|CommsProcesso")
CALL_FLOOR_QUANTILE = 0.10  # the cheapest traced calls: what one costs at least, tracing included
IMPORT_MACHINERY = "<frozen importlib"  # a frame of Python's import system: its process is still importing

LAUNCH_OF_KERNEL = ("SELECT MIN(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId IN "
                    "(SELECT k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.start = {t})")
LAUNCHING_THREAD = ("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid ORDER BY COUNT(*) DESC "
                    "LIMIT 1")
OSRT_AFTER = ('SELECT o.globalTid AS tid, o."end" AS end_ns, s.value AS name FROM OSRT_API o JOIN StringIds s ON '
              's.id = o.nameId WHERE o."end" > {t}')
NVTX_AFTER = 'SELECT globalTid AS tid, "end" AS end_ns FROM NVTX_EVENTS WHERE "end" > {t} AND globalTid IS NOT NULL'
SAMPLES_AFTER = "SELECT globalTid AS tid, start AS end_ns FROM COMPOSITE_EVENTS WHERE start > {t}"
PROCESS_EXITS = ("SELECT o.globalTid AS tid, o.start AS start_ns FROM PROFILER_OVERHEAD o JOIN StringIds s ON "
                 f"s.id = o.nameId WHERE s.value = '{EXIT_FLUSH}'")
CALLS_IN = 'SELECT "end" - start AS ns FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= {lo} AND "end" <= {hi}'


@dataclass(frozen=True)
class WorkersStart:
    """The worker processes still starting (importing) when the loop began (trace ns): how many, when the first of
    them began, when the first and the last of them began the program's work, how many did, and the time they spent
    on it in all (each one's first to last sample in the program's code, summed)."""
    processes: int
    started_ns: int
    first_ready_ns: int
    last_ready_ns: int
    working: int
    busy_ns: int


@dataclass(frozen=True)
class Loop:
    """The loop's span (trace ns), what set each end, the GPU's last operation, and the CUDA calls traced in it."""
    start_ns: int
    start_from: str
    end_ns: int
    end_from: str
    gpu_end_ns: int
    cuda_calls: int
    call_floor_ns: float | None  # the CALL_FLOOR_QUANTILE of their durations: a bound on nsys's cost per call
    workers_start: WorkersStart | None = None  # worker processes that were still importing when the loop began

    @property
    def duration_ns(self) -> int:
        """First iteration to the last output's end."""
        return self.end_ns - self.start_ns


def of(trace, window: Window | None, steps: StepsPart | None) -> Loop | None:
    """The loop of an analysed trace (its analysis's window and steps); None without GPU work."""
    span = gpu_span_estimate(trace)
    if span is None or not (window and window.end_ns):
        return None
    start, start_from = first_iteration(trace, steps, span[0])
    window_end = window.end_ns + (window.teardown_ns or 0)
    main = trace.one_row(LAUNCHING_THREAD)[0] if trace.has("CUPTI_ACTIVITY_KIND_RUNTIME") else None
    stacks = _stacks_beside(trace)
    end, end_from = last_work_end(trace, span[1], main, stacks)
    if window_end >= end:
        end, end_from = window_end, "the analysis window's end (GPU work, steps, output drain and close)"
    calls = call_durations(trace, start, end)
    floor = float(np.quantile(calls, CALL_FLOOR_QUANTILE)) if calls.size else None
    workers = workers_start(stacks, main, start, end) if stacks is not None and main is not None else None
    return Loop(int(start), start_from, int(end), end_from, int(span[1]), int(calls.size), floor, workers)


def cpu_of(trace, window: Window | None, steps: StepsPart | None, gpu: GpuPart | None) -> Loop | None:
    """The loop of a capture without GPU work (a program run on the CPU), as its own clock times it: from its first
    step's start, else the end of its set-up on the main thread (imports, model construction: the Python stacks,
    sections/setup_lines.py), to the end of its last step, else of its last sample in the program's own code, carried
    on by the work other threads and processes did after it (worker processes' outputs); None where neither end is
    known (no steps, no stacks)."""
    if gpu or not (window and window.end_ns):
        return None
    stacks = stacks_of(trace)
    step_ranges = _steps(trace, steps)
    main_pid = first_pid(stacks)
    main = _main_thread(trace, main_pid)
    if len(step_ranges) and "global_tid" in step_ranges:  # the thread that marks the steps runs the loop
        main = int(step_ranges["global_tid"].mode().iloc[0])
    if len(step_ranges):
        start, start_from = int(step_ranges["start_ns"].min()), "the first step's start"
        last, last_from = int(step_ranges["end_ns"].max()), "the last step's end"
    elif stacks is not None and main_pid is not None and main is not None:
        s = stacks.samples
        mine = s[(s["pid"] == main_pid) & (s["tid"] == main_pid)]
        start = setup_lines.setup_end(mine, setup_lines.kinds(stacks.frames, stacks.stacks))
        last = _program_code_end(stacks, main, -1)
        if last is None:
            return None
        start_from = "the end of its set-up (imports, model construction)"
        if start is None:
            start, start_from = int(mine["start_ns"].min()), "its first Python stack sample"
        last_from = "the main thread's last Python stack in the program's own code"
    else:
        return None
    # other threads' CPU samples are left out: on the CPU, torch's OpenMP threads spin on after each parallel region
    # (a sample 29 ms past a 75 ms loop), which is no work of the program's; their OS calls and ranges still count
    end, end_from = last_work_end(trace, last, main, stacks, cpu_samples=False) if main is not None else \
        (last, last_from)
    end_from = last_from if end == last else end_from.replace("the launching thread", "the main thread")
    return Loop(int(start), start_from, int(end), end_from, int(last), 0, None, None)


def stacks_of(trace):
    """The trace's Python stacks: a torch.profiler trace's own calls, else the stacks file beside an nsys export;
    None without (or damaged)."""
    if trace.profiler == "torch.profiler":
        try:
            return kineto_stacks.read(trace)
        except ValueError:
            return None
    return _stacks_beside(trace)


def first_pid(stacks) -> int | None:
    """The pid of the program the command started: the first process sampled."""
    if stacks is None or stacks.samples.empty:
        return None
    s = stacks.samples
    return int(s.loc[s["start_ns"].idxmin(), "pid"])


def _main_thread(trace, pid: int | None) -> int | None:
    """The global thread id of a process's main thread (its tid is its pid)."""
    threads = trace.host.threads
    if pid is None or threads.empty:
        return None
    row = threads[(threads["pid"] == pid) & (threads["tid"] == pid)]
    return int(row["global_tid"].iloc[0]) if len(row) else (int(pid) << 24) | int(pid)


def _steps(trace, steps: StepsPart | None) -> pd.DataFrame:
    """The step ranges the analysis matched (its steps' regex), every one of them."""
    regex = steps.regex if steps else None
    nvtx = trace.host.nvtx
    if not regex or not steps.count or nvtx.empty:
        return nvtx.iloc[0:0] if len(nvtx.columns) else pd.DataFrame(columns=["start_ns", "end_ns"])
    return nvtx[program.matching(nvtx["name"], regex)]


def first_iteration(trace, steps: StepsPart | None, first_gpu_ns: int) -> tuple[int, str]:
    """Where the first iteration starts, warm-up included, and from what: the first step range; else the launch of
    the repeating kernel stream's first kernel; else the first GPU work's launch."""
    if steps and steps.regex and steps.count:
        nvtx = trace.host.nvtx
        ranges = nvtx[program.matching(nvtx["name"], steps.regex)] if len(nvtx) else nvtx
        if len(ranges):
            return int(ranges["start_ns"].min()), "the first step's start"
    starts, ids = trace.device.kernel_sequence(steady.SEQUENCE_LIMIT)
    found = steady.from_kernels(starts, ids) if len(starts) else None
    if found is not None:
        return _launch_of(trace, found.first_ns), "the launch of the repeating kernel stream's first iteration"
    return _launch_of(trace, first_gpu_ns), "the first GPU work's launch"


def _launch_of(trace, kernel_start_ns: int) -> int:
    """The CUDA call that launched the kernel starting then (its start), else the kernel's start."""
    if not (trace.has("CUPTI_ACTIVITY_KIND_RUNTIME") and trace.has("CUPTI_ACTIVITY_KIND_KERNEL")):
        return int(kernel_start_ns)
    launched = trace.one_row(LAUNCH_OF_KERNEL.format(t=int(kernel_start_ns)))[0]
    return int(launched) if launched is not None and launched <= kernel_start_ns else int(kernel_start_ns)


def last_work_end(trace, gpu_end_ns: int, main: int | None, stacks, cpu_samples: bool = True) -> tuple[int, str]:
    """The end of the last work after the GPU's last operation: the launching thread's (main, a global thread id) last
    Python stack in the program's own code (stacks: the Python stacks beside the trace, or None), and any other
    thread's OS runtime calls, NVTX ranges and CPU samples, each process's cut at its exit and at that last stack; the
    GPU's end when none worked after it."""
    ends = []
    if trace.has("OSRT_API"):
        calls = trace.query(OSRT_AFTER.format(t=int(gpu_end_ns)))
        working = calls.groupby("tid")["name"].agg(lambda n: not set(n) <= IDLE_CALLS)
        calls = calls[calls["tid"].map(working).to_numpy(bool)] if len(calls) else calls
        ends.append(("OS runtime calls", calls[["tid", "end_ns"]]))
    if trace.has("NVTX_EVENTS"):
        ends.append(("NVTX ranges", trace.query(NVTX_AFTER.format(t=int(gpu_end_ns)))))
    if cpu_samples and trace.has("COMPOSITE_EVENTS"):
        ends.append(("CPU samples", trace.query(SAMPLES_AFTER.format(t=int(gpu_end_ns)))))
    exits = _process_exits(trace)
    best, said = int(gpu_end_ns), "the GPU's last operation"
    own = _program_code_end(stacks, main, gpu_end_ns)
    if own is not None and own > best:
        best, said = own, "the launching thread's last Python stack in the program's own code"
    last = own if own is not None and own > gpu_end_ns else None  # no work counts once the program's own code is done
    samplers = _profilers_threads(trace)
    for what, rows in ends:
        rows = rows[(rows["tid"].to_numpy() != main) & (rows["tid"].to_numpy() % TID_BITS != 0)
                    & ~np.isin(rows["tid"].to_numpy(), samplers)]
        for tid, end in zip(rows["tid"].to_numpy(), rows["end_ns"].to_numpy()):
            end = min(int(end), exits.get(int(pid_of(int(tid))), int(end)))
            end = min(end, last) if last is not None else end
            if end > best:
                best, said = end, f"{what} of {thread_said(trace, int(tid), main)}"
    return best, said


def thread_said(trace, tid: int, main: int | None = None) -> str:
    """A thread (a global id) as a reader knows it, never by a bare id: 'the thread 'pt_main_thread'', 'another
    process of the program (its thread 'python')' where it is not the launching thread's (main's) process, else
    'another thread of the program' where the trace names it not."""
    name = _thread_name(trace, tid)
    if name and name == _thread_name(trace, tid - tid % TID_BITS + pid_of(tid)):
        name = ""  # the process's own name (python), which a thread inherits: no name of its own
    if main is not None and pid_of(tid) != pid_of(int(main)):
        return "another process of the program" + (f" (its thread '{name}')" if name else "")
    return f"the thread '{name}'" if name else "another thread of the program"


def _thread_name(trace, tid: int) -> str:
    threads = trace.host.threads
    named = threads.loc[threads["global_tid"].to_numpy() == tid, "thread_name"] if len(threads) else ()
    name = str(named.iloc[-1]).strip() if len(named) and named.iloc[-1] is not None else ""
    return "" if name in ("None", "nan") else name


def _stacks_beside(trace):
    """The Python stacks beside the trace, on its clock; None without them (or a damaged file: the loop is then read
    from the trace alone)."""
    path = python_stacks.beside(trace.source)
    if path is None or trace.session_start_utc_ns is None:
        return None
    try:
        return python_stacks.read(path, trace.session_start_utc_ns)
    except ValueError:
        return None


def workers_start(stacks, main: int, loop_start_ns: int, loop_end_ns: int) -> WorkersStart | None:
    """The processes other than the launching one (main: its global thread id) still starting when the loop began
    (_starting) that left their start inside the loop and then ran the program's own code, or never left it: spawned
    workers importing the program's modules again (a resource tracker runs no program code; a worker ready before the
    loop began delays nothing). Each one's ready time is the end of its first sample in the program's own code past its
    start (a process that never got there: its last sample's; a stack's first sample past the imports may be a
    generator's alone, with no callers); None when no process started so late."""
    s = stacks.samples
    s = s[s["pid"] != pid_of(int(main))]
    if s.empty:
        return None
    starting = np.array([_starting(stacks.frames, k) for k in stacks.stacks], bool)
    own = stacks.in_program & ~starting
    k = s["stack"].to_numpy()
    s = s.assign(starting=starting[k], own=own[k])
    by = s.groupby("pid")
    started, never_ready = by["starting"].any(), by["starting"].all()
    mine = s[s["own"]].groupby("pid")["end_ns"]
    ready, last_own = mine.min(), mine.max()
    working = [p for p, t in ready.items() if started[p] and loop_start_ns < t < loop_end_ns]
    if not working:
        return None
    last_any = by["end_ns"].max()
    still = [p for p, t in last_any.items() if never_ready[p] and t > loop_start_ns]  # never got to work
    late = working + still
    ready_all = pd.concat([ready[working], last_any[still]])
    return WorkersStart(len(late), int(s.loc[s["pid"].isin(late), "start_ns"].min()), int(ready[working].min()),
                        int(ready_all.max()), len(working), int((last_own[working] - ready[working]).sum()))


def _starting(frames, stack: tuple[int, ...]) -> bool:
    """Whether a sample's stack is a process's start: Python's import machinery, or a module's body below the
    outermost frame (a spawned worker runs the program's main module again; a stack cut at the sampler's depth keeps
    the inner module bodies even where it loses the import frames)."""
    return any(frames[f].file.startswith(IMPORT_MACHINERY) or (i and frames[f].function == "<module>")
               for i, f in enumerate(stack))


def _program_code_end(stacks, main: int | None, after_ns: int) -> int | None:
    """The end of the launching thread's last Python stack sample after after_ns with a frame of the program's own code
    (the last output's post-processing, the join of its workers; the interpreter's exit has none); None without the
    stacks beside the trace."""
    if main is None or stacks is None:
        return None
    s = stacks.samples
    mine = s[(s["pid"] == pid_of(int(main))) & (s["tid"] == int(main) % TID_BITS) & (s["end_ns"] > after_ns)]
    ends = mine["end_ns"].to_numpy()[stacks.in_program[mine["stack"].to_numpy()]]
    return int(ends.max()) if ends.size else None


def _profilers_threads(trace) -> np.ndarray:
    """The global ids of the threads the profiling added to the program (the Python stack sampler, nsys's own: their
    waits, samples and writes go on to the process's exit, and are no work of the program's; a CPU-only capture's
    loop ended at '[NSys Comms]''s CPU sample 1.8 s after the program's last step, issue 57)."""
    threads = trace.host.threads
    if threads.empty:
        return np.zeros(0, np.int64)
    names = threads["thread_name"].astype(str)
    ours = (names == SAMPLER_THREAD) | names.str.contains(NSYS_THREADS)
    return threads.loc[ours, "global_tid"].to_numpy(np.int64)


def _process_exits(trace) -> dict[int, int]:
    """When each process began to exit (nsys's flush at its exit), by its pid."""
    if not trace.has("PROFILER_OVERHEAD"):
        return {}
    rows = trace.query(PROCESS_EXITS)
    return {int(pid_of(int(t))): int(s) for t, s in zip(rows["tid"], rows["start_ns"])}


def call_durations(trace, lo: int, hi: int) -> np.ndarray:
    """The durations of the CUDA API calls traced inside [lo, hi]."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return np.zeros(0, np.int64)
    return trace.query(CALLS_IN.format(lo=int(lo), hi=int(hi)))["ns"].to_numpy(np.int64)
