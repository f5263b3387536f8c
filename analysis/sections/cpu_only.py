"""A capture without GPU work (a PyTorch program run on a machine without a GPU, on the CPU of one that has one, or
traced without CUDA): what it can show and what it cannot, in one line, with the program and the device it ran on.

    {"gpu": "none" | "not traced" | "unused" | "no GPU work",   # why no GPU operation is in the trace
     "program": "/venv/bin/python my.py --batch 8" | None,      # what nsys launched (META_DATA_CAPTURE)
     "python": bool,                                            # whether that is a Python interpreter
     "line": str}                                               # the sentence the text report prints

Read from the export alone: TARGET_INFO_GPU (the GPUs nsys found), TARGET_INFO_SYSTEM_ENV (NvDriverVersion: 0 on a
machine without an NVIDIA driver; HasDiscreteGpu is 0 on an H200 machine too, so it says nothing), META_DATA_CAPTURE
(the command, and whether CUDA was traced), and the CUDA API table (the program's calls).
"""
from __future__ import annotations

import re
from pathlib import PurePath

from ..common.errors import TraceError
from ..load.trace import Trace
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CpuOnly:
    """Why a trace has no GPU work, what nsys launched, and the one line the text report prints."""
    gpu: str
    program: str | None
    python: bool
    line: str

PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
CAPTURE = ("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:COMMAND' OR name LIKE "
           "'PROCESS_0:ARGUMENT_%' OR name LIKE 'PROCESS_%:COLLECT_CUDA_TRACE' ORDER BY rowid")
SYSTEM = "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'NvDriverVersion'"
MAX_PROGRAM = 160  # characters of the command shown


def launched(trace: Trace) -> list[str] | None:
    """The command line nsys launched (META_DATA_CAPTURE's PROCESS_0:COMMAND and its ARGUMENT_n), None where the
    export does not say (an attached process, a torch.profiler trace)."""
    capture = _rows(trace, "META_DATA_CAPTURE", CAPTURE)
    command = next((v for k, v in capture if k == "PROCESS_0:COMMAND"), None)
    return [command, *(v for k, v in capture if k.startswith("PROCESS_0:ARGUMENT_"))] if command else None


def part(trace: Trace) -> CpuOnly:
    """What a capture without GPU work is (see the module's docstring)."""
    capture = _rows(trace, "META_DATA_CAPTURE", CAPTURE)
    system = dict(_rows(trace, "TARGET_INFO_SYSTEM_ENV", SYSTEM))
    command, *args = launched(trace) or [None]
    cuda_traced = [v.lower() == "true" for k, v in capture if k.endswith(":COLLECT_CUDA_TRACE")]
    calls = _cuda_calls(trace)
    if calls:
        gpu, why = "no GPU work", (f"the program made {calls:,} CUDA API calls but no GPU operation is in the trace "
                                   "(the integrity verdict says whether nsys recorded them all)")
    elif not len(trace.device.gpus) and trace.profiler == "torch.profiler":
        gpu, why = "none", ("no GPU was used (torch.profiler recorded no GPU: its activities had no "
                            "ProfilerActivity.CUDA, or the machine has none)")
    elif not len(trace.device.gpus):
        gpu, why = "none", "no GPU was used (the machine it ran on has no NVIDIA GPU: nsys found none" + (
            ", no NVIDIA driver)" if system.get("NvDriverVersion") == "0" else ")")
    elif trace.profiler == "torch.profiler":
        gpu, why = "unused", (f"no GPU work was recorded (torch.profiler recorded no CUDA activity, though the machine "
                              f"has {_gpu_names(trace)}: its activities had no ProfilerActivity.CUDA, or the program "
                              "ran on the CPU)")
    elif cuda_traced and not any(cuda_traced):
        gpu, why = "not traced", ("nsys did not trace CUDA (--trace without cuda), so whatever ran on the "
                                  f"{_gpu_names(trace)} is not in the trace")
    else:
        gpu, why = "unused", (f"no GPU was used (the program made no CUDA call, though the machine has "
                              f"{_gpu_names(trace)})")
    program = " ".join([command, *args])[:MAX_PROGRAM] if command else None
    python = bool(command) and bool(PYTHON.match(PurePath(command).name))
    who = (f"the {'Python ' if python else ''}program `{program}`" if program else "the program")
    cpu = gpu in ("none", "unused")
    shows = ("its steps, record_function ranges and Python lines" if trace.profiler == "torch.profiler" else
             "its steps, NVTX ranges and OS runtime calls")
    line = (f"{'CPU-only capture' if cpu else 'No GPU work in this trace'}: {why}, so no transfer can be measured; "
            f"it shows {who}{' on the CPU' if cpu else ''}: {shows}")
    return CpuOnly(gpu=gpu, program=program, python=python, line=line)


def _rows(trace: Trace, table: str, statement: str) -> list[tuple[str, str]]:
    """(name, value) rows of a metadata table; none where the export lacks it or it cannot be read."""
    if not trace.has(table):
        return []
    try:
        found = trace.query(statement)
    except TraceError:
        return []
    return [(str(n), str(v)) for n, v in zip(found["name"], found["value"])]


def _cuda_calls(trace: Trace) -> int:
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return 0
    row = trace.one_row("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    return int(row[0]) if row and row[0] else 0


def _gpu_names(trace: Trace) -> str:
    names = sorted({str(n) for n in trace.device.gpus["name"].dropna()}) if len(trace.device.gpus) else []
    return ", ".join(names) if names else "a GPU"
