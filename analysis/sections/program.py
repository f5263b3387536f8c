"""What program the trace holds, so advice speaks of its own mechanisms: PyTorch or plain CUDA, this toolkit's own
workload stages or someone else's program, and who produces the launching thread's input (DataLoader workers)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ...nsys_core.contracts import WORKLOAD_RANGES, pipeline_pace
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ProgramInfo:
    """What the traced program is: its framework, whether it is this toolkit's, its DataLoader workers."""
    framework: str
    toolkit: bool
    toolkit_stage: str | None
    dataloader_workers: DataloaderWorkers


@dataclass(frozen=True, kw_only=True)
class DataloaderWorkers:
    """The DataLoader's worker threads and processes the trace shows."""
    threads: int
    processes: int

# PyTorch names its helper threads (DataLoader workers, the pin-memory thread, autograd): pt_data_worker, pt_data_pin
PYTORCH_THREAD = re.compile(r"^pt_")
PYTORCH_KERNEL = re.compile(r"at::native|at_cuda_detail|vectorized_elementwise_kernel|unrolled_elementwise_kernel|"
                            r"multi_tensor_apply_kernel|^triton_(poi|per|red|tem)_")  # eager ops; Inductor's kernels
DATALOADER_WORKER = "pt_data_worker"
DATALOADER_PIN = "pt_data_pin"
# NVHPC names the kernel of each OpenACC compute region <function>_<line>_gpu (and _gpu__red for its reduction)
OPENACC_KERNEL = re.compile(r"_\d+_gpu(__red)?$")
# emit_nvtx / record_function ranges: "aten::mm, seq = 12, op_id = 34" (op names carry a namespace)
OPERATOR_RANGE = re.compile(r"^[A-Za-z_][\w.]*::\w")
COUNTER = re.compile(r"\d+")
PYTORCH_RANGE = re.compile(r"^aten::|, seq = \d+|, op_id = \d+")
OPERATOR_COUNTERS = re.compile(r"(, (seq|op_id|sizes|input_op_ids|stashed seq) = .*)$")


def base_name(name: str) -> str:
    """An NVTX name without PyTorch's per-call counters: 'aten::mm, seq = 12, op_id = 34' -> 'aten::mm'."""
    return OPERATOR_COUNTERS.sub("", name) if ", " in name else name


def family(name: str) -> str:
    """Ranges that differ only by counters are one thing to a reader: 'IO 190' -> 'IO N', 'aten::mm, seq = 3' ->
    'aten::mm'."""
    return COUNTER.sub("N", base_name(name))


def per_name(names: pd.Series, fn) -> pd.Series:
    """fn(str(name)) for each row, computed once per distinct name (a long capture repeats a few names millions of
    times)."""
    codes, uniques = pd.factorize(names, use_na_sentinel=False)
    mapped = np.array([fn(str(u)) for u in uniques], dtype=object)
    return pd.Series(mapped[codes] if len(codes) else np.zeros(0, dtype=object), index=names.index, dtype=object)


def matching(names: pd.Series, regex: str) -> np.ndarray:
    """Whether regex is found in each name (Series.str.contains), tested once per distinct name."""
    pat = re.compile(regex)
    return per_name(names, lambda n: bool(pat.search(n))).to_numpy(bool)


# PyTorch's per-call counters, autograd nodes; compilation and autotuning (XLA, Triton, torch.compile): one-off work
NOT_A_STEP = re.compile(r", (op_id|seq) = \d+|^\w+Backward\d*$|compil|autotun|triton|inductor|dynamo|^Xla", re.I)


def is_step_candidate(name: str) -> bool:
    """Whether a range can mark a loop's steps: not a PyTorch op's range (aten::mm, `detach_, op_id = 3`, a
    profiler record with its counter, AddmmBackward0)."""
    return not (is_operator_range(name) or NOT_A_STEP.search(name) or pipeline_pace(name))  # the pipeline's own figures


def is_operator_range(name: str) -> bool:
    """A PyTorch operator range (emit_nvtx, record_function of an op), not a phase the user marked."""
    return bool(OPERATOR_RANGE.match(name))


def describe(threads: pd.DataFrame, nvtx: pd.DataFrame, kernel_names, run_record: dict | None) -> ProgramInfo:
    """The framework (pytorch, openacc or cuda), whether it is this toolkit's workload (its stage), and the
    DataLoader's workers."""
    names = set(threads["thread_name"].dropna().astype(str)) if len(threads) else set()  # NULL in a damaged export
    nvtx_names = set(nvtx["name"].dropna().astype(str).unique()) if len(nvtx) else set()
    pytorch = (any(PYTORCH_THREAD.match(n) for n in names) or any(PYTORCH_RANGE.search(n) for n in nvtx_names)
               or any(PYTORCH_KERNEL.search(str(k)) for k in kernel_names))
    stage = (run_record or {}).get("stage")
    toolkit = bool(stage) or len(nvtx_names & WORKLOAD_RANGES) >= 2
    workers = threads[threads["thread_name"] == DATALOADER_WORKER] if len(threads) else threads
    kernels = [str(k) for k in kernel_names if isinstance(k, str)]
    openacc = bool(kernels) and sum(bool(OPENACC_KERNEL.search(k)) for k in kernels) >= 0.5 * len(kernels)
    framework = "pytorch" if pytorch or toolkit else "openacc" if openacc else "cuda"
    return ProgramInfo(framework=framework, toolkit=toolkit, toolkit_stage=stage,
                       dataloader_workers=DataloaderWorkers(threads=int(len(workers)), processes=int(
                           workers["pid"].nunique()) if len(workers) else 0))


def loader_threads(threads: pd.DataFrame, pids: set) -> dict:
    """The DataLoader's pin-memory threads in the launching processes, and its worker processes' main threads."""
    if threads.empty:
        return {"pin": set(), "workers": set()}
    pin = threads[(threads["thread_name"] == DATALOADER_PIN) & threads["pid"].isin(list(pids))]
    workers = threads[(threads["thread_name"] == DATALOADER_WORKER) & (threads["tid"] == threads["pid"])]
    return {"pin": set(pin["global_tid"].astype("int64")), "workers": set(workers["global_tid"].astype("int64"))}


def toolkit_record(trace_path: str) -> dict | None:
    """The run record `profile` writes beside its trace (<base>.run.json), if it names one of our stages."""
    p = Path(trace_path)
    stem = p.name.split(".")[0]
    for candidate in (p.with_name(f"{stem}.run.json"),):
        try:
            data = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("stage"), str):
            return data
    return None
