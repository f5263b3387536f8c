"""What the loop's thread pays for OutputPipeline's set-up: the time inside each submit() of a short run, and what
forking every worker at the first submit would cost instead (the library before issue 37's ramp).

The parent holds --rss-gb of touched memory, as a CUDA program with a model does: a fork copies the page tables, so
its cost grows with the parent's memory. No GPU needed (on a GPU machine the CUDA half adds the first buffer's pin).

usage:  python benchmarks/pipeline_setup.py [--workers 8] [--batches 16] [--rss-gb 2] [--mb 1] [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from nsys_transfer.fixes import OutputPipeline
from nsys_transfer.fixes.workers import WorkerPool


def submit_times(workers: int, batches: int, outputs: torch.Tensor) -> list[float]:
    """Seconds inside each submit() of a run of `batches` batches."""
    took = []
    with OutputPipeline(lambda i, a: None, workers=workers) as pipe:
        for i in range(batches):
            t = time.perf_counter()
            pipe.submit(i, outputs)
            took.append(time.perf_counter() - t)
    return took


def all_forks_at_once(workers: int) -> float:
    """Seconds to fork every worker at once (then stopped)."""
    t = time.perf_counter()
    pool = WorkerPool(lambda *a: None, workers, slots=1)
    took = time.perf_counter() - t
    pool.close()
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--rss-gb", type=float, default=2.0, help="touched memory the parent holds (a model's host side)")
    p.add_argument("--mb", type=int, default=1, help="one batch's outputs (small: their copy costs the same either way)")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    ballast = torch.ones(int(a.rss_gb * 2**30) // 4)  # touched: its page tables are what a fork copies
    outputs = torch.ones(a.mb * 2**20 // 4)
    runs = [submit_times(a.workers, a.batches, outputs) for _ in range(a.repeat)]
    at_once = [all_forks_at_once(a.workers) for _ in range(a.repeat)]
    first = statistics.median(r[0] for r in runs)
    later = statistics.median(max(r[1:]) for r in runs)
    whole = statistics.median(at_once)
    print(f"parent {ballast.numel() * 4 / 2**30:.1f} GiB touched, workers={a.workers}, {a.batches} batches of "
          f"{a.mb} MB, median of {a.repeat}")
    print(f"{'first submit (buffers, 2 forks, the first copy)':<52} {1000 * first:8.1f} ms")
    print(f"{'longest later submit (a fork and a copy at most)':<52} {1000 * later:8.1f} ms")
    print(f"{f'{a.workers} forks at once (the first submit before the ramp)':<52} {1000 * whole:8.1f} ms")
    print(f"{'first submit / all forks at once':<52} {first / whole:8.2f}")


if __name__ == "__main__":
    main()
