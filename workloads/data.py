"""Synthetic inputs, the DataLoader, and the article's part-1 prefetcher (next batch copied on a side stream)."""
from __future__ import annotations

import functools
import os

import torch
from torch.utils.data import DataLoader, Dataset

from .lifetime import die_with_parent

VOCAB = 30522  # BERT's vocabulary size


class SyntheticImages(Dataset):
    """Random 3 x img x img images; deterministic per index so reruns see the same data."""

    def __init__(self, n: int, img: int, seed: int = 0):
        self.n, self.img, self.seed = n, img, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        return torch.randn(3, self.img, self.img, generator=g)


class SyntheticTokens(Dataset):
    """Random token ids of one sequence length, for the embedding encoder."""

    def __init__(self, n: int, tokens: int, seed: int = 0):
        self.n, self.tokens, self.seed = n, tokens, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        return torch.randint(0, VOCAB, (self.tokens,), generator=g)


def make_loader(cfg, n_batches: int, naive: bool) -> DataLoader:
    """The DataLoader of synthetic input for n_batches; naive: one process, pageable memory (part 1's before)."""
    n = n_batches * cfg.batch
    ds = SyntheticImages(n, cfg.img, cfg.seed) if cfg.model == "deeplabv3" else SyntheticTokens(n, cfg.tokens, cfg.seed)
    if naive:  # part 1's "before": everything on the main thread, pageable memory
        return DataLoader(ds, batch_size=cfg.batch, num_workers=0, pin_memory=False)
    workers = cfg.loader_workers
    # torch's own watchdog ends orphaned loader workers only within 5 s; the parent-death signal does it at once
    return DataLoader(ds, batch_size=cfg.batch, num_workers=workers, pin_memory=cfg.device == "cuda",
                      prefetch_factor=4 if workers else None, persistent_workers=False,
                      worker_init_fn=functools.partial(_loader_worker_init, os.getpid()) if workers else None)


def _loader_worker_init(parent_pid: int, worker_id: int) -> None:
    die_with_parent(parent_pid, f"loader-worker-{worker_id}")


class SyncBatches:
    """Part 1's "before": the host-to-device copy blocks the main thread."""

    def __init__(self, loader, device):
        self.it, self.device = iter(loader), device

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.it).to(self.device)


class Prefetcher:
    """Copies the next batch to the GPU on a side stream while the current one computes."""

    def __init__(self, loader, device):
        self.it, self.device = iter(loader), device
        self.stream = torch.cuda.Stream() if device.type == "cuda" else None
        self.next_batch = None
        self._preload()

    def _preload(self):
        try:
            batch = next(self.it)
        except StopIteration:
            self.next_batch = None
            return
        if self.stream is None:
            self.next_batch = batch
            return
        with torch.cuda.stream(self.stream):
            self.next_batch = batch.to(self.device, non_blocking=True)

    def __iter__(self):
        return self

    def __next__(self):
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
        batch = self.next_batch
        if batch is None:
            raise StopIteration
        if self.stream is not None:
            # allocated on the side stream, used on the compute stream: keep the allocator from reusing it early
            batch.record_stream(torch.cuda.current_stream())
        self._preload()
        return batch
