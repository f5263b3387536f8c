"""Runs one stage: warm-up, the measured window (cudaProfilerStart/Stop around it), integrity, the record."""
from __future__ import annotations

import os
import platform
import sys
import time

import torch

from ..nsys_core.contracts import COMPUTE, DRAIN_OUTPUTS, GET_BATCH, step_range

from ..fixes.checksums import IntegrityReport, checksum_tensor
from ..fixes.ranges import nvtx_range
from . import distributed as dd
from . import hostload
from .config import RunConfig
from .data import make_loader
from .lifetime import raise_if_stopped
from .models import build_model, torch_dtype
from .stages import stage_class

SHARED_STAGES = ("bufpool", "async", "streams", "pinned")


class ResourceError(RuntimeError):
    """The run would not fit the GPU or host memory; the message says what to lower."""


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def _shm_free() -> int:
    try:
        st = os.statvfs("/dev/shm")
        return st.f_bavail * st.f_frsize
    except OSError:
        return 1 << 62


def preflight(cfg: RunConfig, ranks_per_host: int = 1) -> None:
    """Refuse sizes that cannot fit, before any model is built (host memory is shared by every rank)."""
    out = cfg.output_bytes()
    gib = 1 << 30
    per_host = f" on each of {ranks_per_host} ranks" if ranks_per_host > 1 else ""
    if cfg.stage in SHARED_STAGES:
        host = cfg.n_buffers * out * ranks_per_host
        what = f"{cfg.n_buffers} shared output buffers of {out / gib:.2f} GiB{per_host}"
    elif cfg.stage == "multiproc":
        host = (cfg.output_workers + 2) * out * ranks_per_host
        what = f"up to {cfg.output_workers + 2} queued outputs of {out / gib:.2f} GiB{per_host}"
    else:
        host = 2 * out * ranks_per_host
        what = f"two outputs of {out / gib:.2f} GiB{per_host}"
    if host > _mem_available():
        raise ResourceError(f"{what} need {host / gib:.1f} GiB of host memory but {_mem_available() / gib:.1f} GiB "
                            "is available; lower --batch, --buffers or --output-workers")
    if cfg.stage in SHARED_STAGES + ("multiproc",) and host > _shm_free():
        raise ResourceError(f"{what} need {host / gib:.1f} GiB in /dev/shm but it has {_shm_free() / gib:.1f} GiB free; "
                            "enlarge it (docker: --shm-size) or lower --buffers / --batch")
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise ResourceError("--device cuda but no CUDA GPU is visible; use --device cpu (stages naive-input, "
                                "baseline, multiproc, bufpool, ceiling) or run on a GPU machine")
        free, _ = torch.cuda.mem_get_info()
        if 2 * out > free:
            raise ResourceError(f"the output alone ({out / gib:.2f} GiB, twice in flight) does not fit the "
                                f"{free / gib:.1f} GiB free on the GPU; lower --batch")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(cfg: RunConfig, log=print) -> dict:
    """Run one stage on this rank: warm-up, the measured window, the integrity check; return the run record."""
    cfg.validate()
    rank = dd.current()
    cfg = dd.share(cfg, rank)
    preflight(cfg, ranks_per_host=rank.world)
    dd.init(rank, cfg.device)
    device = torch.device(cfg.device, rank.local) if cfg.device == "cuda" else torch.device("cpu")
    model = build_model(cfg, device)
    stage = stage_class(cfg.stage)(cfg, device)
    dtype = torch_dtype(cfg)
    started = time.time()
    try:
        stage.setup(cfg.output_shape(), dtype)  # forks output workers before the loader starts its own
        expected, elapsed, host_cpu = _steps(cfg, rank, device, model, stage, log)
        integrity = _integrity(stage, expected)
    finally:
        stage.close()
    record = _record(cfg, rank, device, elapsed, host_cpu, integrity, started)
    record = dd.gather(rank, record)
    dd.finish(rank)
    return record


def _steps(cfg: RunConfig, rank, device, model, stage, log) -> tuple[dict[int, torch.Tensor], float, dict | None]:
    """The warm-up and measured steps: each step's output checksum, the measured seconds and the host CPU load."""
    total = cfg.warmup + cfg.steps
    expected: dict[int, torch.Tensor] = {}
    loader = make_loader(cfg, total, naive=stage.naive_input)
    batches = iter(stage.batches(loader, device))
    t0 = None
    with torch.inference_mode():
        for i in range(total):
            raise_if_stopped()
            if i == cfg.warmup:
                stage.drain()
                _sync(device)
                dd.barrier(rank)  # every rank starts its measured window together
                if cfg.profile and device.type == "cuda":
                    torch.cuda.profiler.start()
                cpu0 = hostload.read()
                t0 = time.perf_counter()
            with nvtx_range(step_range(i)):
                with nvtx_range(GET_BATCH):
                    batch = next(batches)
                with nvtx_range(COMPUTE):
                    output = model(batch)
                    if stage.copies_output:
                        expected[i] = checksum_tensor(output)
                stage.handle(i, output)
            del output, batch
            if rank.is_main and (i < cfg.warmup or i % 10 == 9):
                log(f"  step {i + 1}/{total}{' (warm-up)' if i < cfg.warmup else ''}", file=sys.stderr)
        with nvtx_range(DRAIN_OUTPUTS):  # the output workers' backlog when the last step's GPU work is done
            stage.drain()
            _sync(device)
        raise_if_stopped()
        elapsed = time.perf_counter() - t0
        host_cpu = hostload.busy_fraction(cpu0, hostload.read())
        if cfg.profile and device.type == "cuda":
            dd.barrier(rank)  # nsys ends a multi-process capture at the first stop: stop together
            torch.cuda.profiler.stop()
    return expected, elapsed, host_cpu


def _integrity(stage, expected: dict[int, torch.Tensor]) -> IntegrityReport:
    """The workers' checksums against the ones taken on the GPU (unchecked when the stage copies nothing)."""
    if stage.copies_output:
        return stage.integrity({i: int(v.item()) for i, v in expected.items()})
    return IntegrityReport(expected_batches=0, checked=False)


def _record(cfg: RunConfig, rank, device, elapsed: float, host_cpu, integrity: IntegrityReport,
            started: float) -> dict:
    """This rank's run record: throughput over the measured window, host CPU, integrity and environment."""
    return {
        "stage": cfg.stage,
        "config": cfg.as_dict(),
        "throughput": {"steps": cfg.steps, "seconds": elapsed, "steps_per_s": cfg.steps / elapsed,
                       "samples_per_s": cfg.steps * cfg.batch / elapsed,
                       "output_gb_per_s": cfg.steps * cfg.output_bytes() / elapsed / 1e9},
        "output_bytes_per_batch": cfg.output_bytes(),
        "host_cpu": host_cpu,  # the CPUs this process may use, over the measured window (all ranks share them)
        "integrity": integrity.as_dict(),
        "environment": environment(device),
        "wall_s": time.time() - started,
        "rank": rank.rank,
    }


def environment(device) -> dict:
    """Versions and hardware of this run (torch, CUDA, Python, host, CPUs, GPU) for the record."""
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "host": platform.node(), "cpus": os.cpu_count()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["gpu_index"] = device.index if device.index is not None else torch.cuda.current_device()
    return env
