"""cpu_roll.py fixed (issue 57): the 64 shifted copies summed as a moving sum over the sample, from one cumulative
sum (two NumPy calls over the whole array), instead of a Python loop of np.roll calls; the rest as it was. Traced as cpu_roll.py is (its docstring says how).

usage: cpu_roll_fixed.py [--steps 24] [--profile OUT.json[.gz]]
"""
import argparse
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
        # column j sums x[:, j - k] for k < 64 (np.roll(x, k, axis=1) summed): a window of 64 over x wrapped around
        wrapped = np.concatenate([np.zeros((64, 1)), x[:, 256 - 63:], x], axis=1).cumsum(axis=1)
        return torch.from_numpy((wrapped[:, 64:] - wrapped[:, :256]).astype(np.float32))


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
    print(f"RESULT program=cpu_roll_fixed steps={args.steps} loop_s={loop_s:.3f} total={total}")


if __name__ == "__main__":
    main()
