"""nsys's own word on the capture, for the integrity figures (capture_figures.py): the messages it stored in the
export (2024+; its warnings and errors, its count of CUDA events, the doubts it raises about a process's events and
whether the trace's rows or its own log explain them), and the nsys that exported the trace against the driver it
recorded."""
from __future__ import annotations

import re

import numpy as np

from ...nsys_core import nsys_messages
from ...nsys_core.driver import compare, parse_cuda

from ..common.errors import TraceError
from ..load import sql
from ..load.frames import pid_of
from ..load.trace import Trace
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class NsysDiagnostics:
    """nsys's own count of CUDA events against the rows exported, its messages and the doubts they raise."""
    cuda_events_collected: int | None
    cuda_rows_exported: int
    messages: tuple[str, ...]
    doubts: tuple[NsysDoubt, ...]


@dataclass(frozen=True, kw_only=True)
class NsysDoubt:
    """One nsys message that questions completeness, per process, and what explains it."""
    said: str
    kind: str
    events: str
    pid: int
    times: int
    cuda_calls: int | None
    explained: str | None


@dataclass(frozen=True, kw_only=True)
class CaptureVersions:
    """The exporting nsys against the driver the trace recorded."""
    nsys_version: str
    driver_cuda: str | None
    nsys_newest_cuda: str | None
    nsys_older_than_driver: bool | None

COLLECTED = re.compile(r"Number of CUDA events collected:\s*(\d+)")
SAMPLES_COLLECTED = re.compile(r"Number of IP samples collected:\s*(\d+)")
# CPU samples nsys lost, as a share of those it took, that leave every figure standing: the samples only say where
# threads ran (the lines, a gap's CPU work); a few lost under load (nsys 2024.2, 2 cores, two other jobs: 9 of 4,000)
# shift no figure, and calling them an incomplete capture alarms for nothing
SAMPLES_LOST_NOTED = 0.05


def diagnostics(trace: Trace, exported: int, gpu_pids: set[int]) -> dict:
    """nsys's own messages stored in the export (2024+): warnings and errors, each "no CUDA/NVTX events" one said of
    which process and whether the rows bear it out; and its count of CUDA events."""
    out = {"cuda_events_collected": None, "cuda_rows_exported": int(exported), "messages": [], "doubts": []}
    if not trace.has("DIAGNOSTIC_EVENT"):
        return out
    pid = sql.PID_OF.format(col="globalPid") if "globalPid" in trace.columns("DIAGNOSTIC_EVENT") else "NULL"
    try:
        found = trace.query(sql.DIAGNOSTICS.format(pid=pid))
    except TraceError:
        return out
    out["doubts"] = doubts(trace, found, gpu_pids)
    found["text"] = [_reconciled(str(t), p, trace, gpu_pids) for t, p in zip(found["text"], found["pid"])]
    collected = [int(m.group(1)) for t in found["text"].astype(str) for m in [COLLECTED.search(t)] if m]
    if collected:
        out["cuda_events_collected"] = int(sum(collected))
    warn = found[found["severity"].isin([2, 3])]  # ENUM_DIAGNOSTIC_SEVERITY_LEVEL: 2 Warning, 3 Error
    out["messages"] = [" ".join(str(t).split())[:300] for t in warn["text"].drop_duplicates().head(20)]
    return out


NO_EVENTS = re.compile(r"^No (CUDA|NVTX) events collected")
# nsys's log when the program's cudaProfilerStart began the capture: nsys then stops at the range's end while the
# processes run, and says "Not all <kind> events might have been collected" of each (every real range capture we
# have: nsys 2024.2, 2024.6, 2025.3); what came after the range is not the capture's
RANGE_STARTED = re.compile(r"^Profiling started due to .+ in the application", re.I)


def doubts(trace: Trace, found, gpu_pids: set[int]) -> list[dict]:
    """nsys's messages that question whether the capture holds every event (nsys_messages.doubt), once per message
    and process: {said, kind, events, pid, times, cuda_calls, explained}. cuda_calls: the process's CUDA API calls
    in the export, counted for a CUDA doubt about a process without GPU work (else None). explained: why the rows or
    nsys's own log account for it (a sentence), or None: then the capture is in doubt (rules/capture_checks.py)."""
    texts = [" ".join(str(t).split()) for t in found["text"]]
    ranged = any(RANGE_STARTED.match(t) for t in texts)
    samples = sum(int(m.group(1)) for t in texts for m in [SAMPLES_COLLECTED.search(t)] if m)
    groups: dict[tuple[str, int | None], dict] = {}
    for text, p in zip(texts, found["pid"]):
        said = nsys_messages.doubt(text)
        if said is None:
            continue
        pid = int(p) if p is not None and p == p else None
        d = groups.setdefault((text, pid), {"said": text[:300], "kind": said[0], "events": said[1], "pid": pid,
                                            "times": 0, "cuda_calls": None, "explained": None})
        d["times"] += 1
    for d in groups.values():
        if d["pid"] is not None and d["pid"] not in gpu_pids and (d["events"] == "CUDA" or d["kind"] == "not-all"):
            d["cuda_calls"] = _cuda_calls(trace, d["pid"])  # a process without GPU work: did it call CUDA at all?
        d["explained"] = _samples_lost(d, samples) or _explained(trace, d, ranged, gpu_pids)
    return list(groups.values())


def _samples_lost(d: dict, samples: int) -> str | None:
    """Why a doubt about lost CPU samples leaves the figures standing: a few (at most SAMPLES_LOST_NOTED of those
    nsys took); None for any other doubt, or more lost than that (the lines and the gaps' CPU work are then in
    question: a doubt)."""
    lost = nsys_messages.lost_samples(d["said"]) if d["events"] == nsys_messages.CPU_SAMPLES else None
    if lost is None or not samples or lost > SAMPLES_LOST_NOTED * (samples + lost):
        return None
    share = lost / (samples + lost)
    return (f"nsys lost {lost:,} CPU sample{'s' if lost != 1 else ''} of the {samples + lost:,} it took "
            f"({'under 0.1%' if share < 0.001 else f'{share:.1%}'}): they only say where threads ran, and so few move "
            "no figure here")


def _explained(trace: Trace, d: dict, ranged: bool, gpu_pids: set[int]) -> str | None:
    """Why a doubt of nsys's questions nothing here, or None when nothing explains it."""
    if d["kind"] == "not-all" and ranged:
        return ("the program's cudaProfilerStart began the capture and nsys stopped at the range's end while the "
                "process ran: it says this of every process then, and what came after the range is not the capture's")
    if d["kind"] == "not-all" and d["pid"] is not None and gpu_pids and d["pid"] not in gpu_pids and \
            not d["cuda_calls"] and d["pid"] not in _nvtx_pids(trace):
        return (f"process {d['pid']} holds no GPU work, CUDA call or NVTX range in the export (a helper, e.g. a "
                "compile worker ended at exit): what nsys could not flush of it is outside the GPU's figures")
    if d["kind"] != "not-started" or (d["pid"] is not None and d["pid"] in gpu_pids) or d["cuda_calls"]:
        return None
    if not gpu_pids and not len(trace.device.gpus) and not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return ("the machine lists no GPU and the trace holds no CUDA rows: nothing ran on a GPU, so no CUDA event "
                "is missing (nsys says this of a PyTorch program run on the CPU)")
    others = sorted(gpu_pids - {d["pid"]})
    if d["pid"] is not None and others:
        return (f"process {d['pid']} made no CUDA call nsys recorded and the GPU work is process "
                f"{', '.join(map(str, others))}'s: nsys says this of processes that load CUDA's libraries without "
                "using a GPU (compile workers, helpers)")
    return None


def _nvtx_pids(trace: Trace) -> set[int]:
    return set(pid_of(trace.host.nvtx["global_tid"].to_numpy(np.int64)).tolist()) if len(trace.host.nvtx) else set()


def _cuda_calls(trace: Trace, pid: int | None) -> int:
    """The CUDA API calls the export holds of a process (of every process for None)."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return 0
    where = f" WHERE {sql.PID_OF.format(col='globalTid')} = {int(pid)}" if pid is not None else ""
    row = trace.one_row(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME{where}")
    return int(row[0]) if row and row[0] else 0


def _reconciled(text: str, pid, trace: Trace, gpu_pids: set[int]) -> str:
    """nsys says "No CUDA events collected" (or NVTX) once per process: say which, and whether the trace's rows agree
    (the GPU work is another process's) or contradict it."""
    m = NO_EVENTS.match(text)
    if not m or pid is None or pid != pid:
        return text
    pid, what = int(pid), m.group(1)
    if what == "CUDA":
        others = sorted(gpu_pids - {pid})
        if pid in gpu_pids:
            return f"{text} [about process {pid}, yet the trace holds its GPU work: the message contradicts the rows]"
        return f"{text} [about process {pid}, which runs no GPU work" + (
            f"; the GPU work is process {', '.join(map(str, others))}'s]" if others else "]")
    nvtx_pids = _nvtx_pids(trace)
    if pid in nvtx_pids:
        return f"{text} [about process {pid}, yet the trace holds its NVTX ranges: the message contradicts the rows]"
    return f"{text} [about process {pid}, which marks no NVTX ranges" + (
        "; the ranges are other processes'" if nvtx_pids else "") + "]"


def capture(trace: Trace) -> dict:
    """The nsys that exported the trace against the driver it recorded (TARGET_INFO_SYSTEM_ENV.CudaDriverVersion):
    an nsys older than the driver is a risk, not proof (the bundled H200 stages: 2023.4 on CUDA 13.0, complete)."""
    out = {"nsys_version": trace.nsys_version, "driver_cuda": None, "nsys_newest_cuda": None,
           "nsys_older_than_driver": None}
    driver = None
    if trace.has("TARGET_INFO_SYSTEM_ENV"):
        try:
            found = trace.query(sql.DRIVER_VERSION)
        except TraceError:
            found = None
        if found is not None and len(found):
            driver = parse_cuda(found["value"].iloc[0])
    m = re.match(r"(\d{4})\.(\d+)", trace.nsys_version)
    if m:
        c = compare(trace.nsys_version, (int(m.group(1)), int(m.group(2))), driver)
        out.update(driver_cuda=c["driver_cuda"], nsys_newest_cuda=c["nsys_newest_cuda"],
                   nsys_older_than_driver=c["older_than_driver"] if driver else None)
    elif driver:
        out["driver_cuda"] = f"{driver[0]}.{driver[1]}"
    return out
