"""A newcomer's CPU inference loop (issue 57): a Dataset whose __getitem__ sums 64 shifted copies of a sample with
np.roll in a Python loop, read by a DataLoader on the main thread (num_workers=0), and a small model; each step in an
NVTX range. The fix is cpu_roll_fixed.py (the same sum in one NumPy gather). Each prints its own clock over the loop.

Traced on the 2-core machine without a GPU for tests/test_verify_cpu.py (tests/data/newcomer/, RESULTS.txt there):
    nsys-transfer run -o cpu_roll_nsys2024 --sample none --python-backtrace none -- python tests/programs/cpu_roll.py
    python tests/programs/cpu_roll.py --profile cpu_roll_torch.pt.trace.json.gz   (torch.profiler, CPU activity)

usage: cpu_roll.py [--steps 24] [--profile OUT.json[.gz]]
"""
import argparse
import os
import time

import numpy as np
import nvtx
import torch
from torch.utils.data import DataLoader, Dataset


class Shifted(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = np.random.default_rng(i).random((64, 256), dtype=np.float32)
        acc = np.zeros_like(x)
        for k in range(64):
            acc += np.roll(x, k, axis=1)
        return torch.from_numpy(acc)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--profile", default=None, help="record a torch.profiler trace (CPU) of the loop into this file")
    args = p.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)).eval()
    loader = DataLoader(Shifted(), batch_size=16)
    prof = None
    if args.profile:
        from torch.profiler import ProfilerActivity, profile, schedule
        prof = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=args.steps - 2),
                       with_stack=True, on_trace_ready=lambda p: p.export_chrome_trace(args.profile))
        prof.start()
    total, t0 = 0, time.perf_counter()
    with torch.inference_mode():
        for step, batch in enumerate(loader):
            if step == args.steps:
                break
            with nvtx.annotate(f"step {step}"):
                total += int(model(batch).argmax(-1).sum())
            if prof:
                prof.step()
    loop_s = time.perf_counter() - t0
    if prof:
        prof.stop()
    print(f"RESULT program=cpu_roll steps={args.steps} loop_s={loop_s:.3f} total={total} process_s={process_s():.2f} "
          f"cpu_s={sum(os.times()[:2]):.2f}")  # the process's own CPU time: less moved by other jobs than its clock


def process_s() -> float:
    """Seconds since this process started (its imports included), from the kernel's clock (10 ms ticks)."""
    ticks = os.sysconf("SC_CLK_TCK")
    started = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / ticks
    return float(open("/proc/uptime").read().split()[0]) - started


if __name__ == "__main__":
    main()
