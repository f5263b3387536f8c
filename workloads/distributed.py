"""Data-parallel inference under torchrun: one process per GPU, each with its share of the workers.

torch.distributed does the process management (gloo on CPU, NCCL on GPUs). Outside torchrun
(no RANK in the environment) everything here is a no-op and the run is the single-process one.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass

from .config import RunConfig


@dataclass(frozen=True)
class Rank:
    """This process's place in a torchrun job: rank, world size and local rank."""
    rank: int = 0
    world: int = 1
    local: int = 0

    @property
    def distributed(self) -> bool:
        """Whether this process runs under torchrun (several ranks, or RANK set)."""
        return self.world > 1 or "RANK" in os.environ

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, which writes the records."""
        return self.rank == 0


def current() -> Rank:
    """This process's Rank, from torchrun's environment variables."""
    return Rank(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)))


def init(rank: Rank, device_type: str) -> None:
    """Join the process group (nccl on CUDA, gloo otherwise) when running under torchrun."""
    if not rank.distributed:
        return
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    if device_type == "cuda":
        torch.cuda.set_device(rank.local)
    if not dist.is_initialized():
        dist.init_process_group(**process_group_args(rank, device_type))


def process_group_args(rank: Rank, device_type: str) -> dict:
    """init_process_group's arguments: on GPUs NCCL with this rank's own device bound (device_id), which NCCL would
    otherwise guess from the global rank ("can cause a hang if rank to GPU mapping is heterogeneous")."""
    if device_type != "cuda":
        return {"backend": "gloo"}
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    if "device_id" not in inspect.signature(dist.init_process_group).parameters:  # torch < 2.3
        return {"backend": "nccl"}
    return {"backend": "nccl", "device_id": torch.device("cuda", rank.local)}


def worker_totals(loader_workers: int | None, output_workers: int | None, world: int) -> dict:
    """Worker counts for the whole job. Unset: the single-GPU default on every GPU (so N GPUs get N x the workers of
    the single-GPU run); set: a total that share() divides among the ranks."""
    d = RunConfig()
    return {"loader_workers": d.loader_workers * world if loader_workers is None else loader_workers,
            "output_workers": d.output_workers * world if output_workers is None else output_workers}


def share(cfg, rank: Rank):
    """This rank's config: its share of the loader and output workers, its own data (seed), its own GPU."""
    if not rank.distributed:
        return cfg
    return dataclasses.replace(cfg, output_workers=max(1, cfg.output_workers // rank.world),
                               loader_workers=cfg.loader_workers // rank.world,
                               seed=cfg.seed + 1000 * rank.rank)


def barrier(rank: Rank) -> None:
    """Wait for every rank (nothing with one process)."""
    if rank.distributed:
        import torch.distributed as dist  # noqa: PLC0415
        dist.barrier()


def gather(rank: Rank, record: dict) -> dict:
    """Rank 0 gets every rank's record and the totals; other ranks get their own record back."""
    if not rank.distributed:
        return record
    import torch.distributed as dist  # noqa: PLC0415

    records = [None] * rank.world
    dist.all_gather_object(records, record)
    if not rank.is_main:
        return record
    seconds = max(r["throughput"]["seconds"] for r in records)
    steps = sum(r["throughput"]["steps"] for r in records)
    samples = sum(r["throughput"]["steps"] * r["config"]["batch"] for r in records)
    out_bytes = sum(r["throughput"]["steps"] * r["output_bytes_per_batch"] for r in records)
    integ = [r["integrity"] for r in records]
    total = {
        "world_size": rank.world, "steps": steps, "seconds": seconds, "steps_per_s": steps / seconds,
        "samples_per_s": samples / seconds, "output_gb_per_s": out_bytes / seconds / 1e9,
        "per_rank_steps_per_s": [r["throughput"]["steps_per_s"] for r in records],
    }
    loads = [r["host_cpu"] for r in records if r.get("host_cpu")]
    merged_cpu = max(loads, key=lambda x: x["busy"]) if loads else None  # one host: every rank read the same CPUs
    merged = dict(records[0])
    merged["ranks"] = records
    merged["throughput"] = total
    merged["host_cpu"] = merged_cpu
    merged["integrity"] = {**integ[0], "checked": all(i["checked"] for i in integ),
                           "ok": all(i["ok"] for i in integ),
                           "expected_batches": sum(i["expected_batches"] for i in integ),
                           "processed": sum(i["processed"] for i in integ),
                           "n_missing": sum(i["n_missing"] for i in integ),
                           "n_duplicated": sum(i["n_duplicated"] for i in integ),
                           "n_mismatched": sum(i["n_mismatched"] for i in integ),
                           "per_rank_ok": [i["ok"] for i in integ]}
    return merged


def finish(rank: Rank) -> None:
    """Leave the process group, if one was joined."""
    if rank.distributed:
        import torch.distributed as dist  # noqa: PLC0415
        if dist.is_initialized():
            dist.destroy_process_group()
