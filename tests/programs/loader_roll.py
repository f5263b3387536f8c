"""A newcomer's CPU inference loop (issue 57): a Dataset whose __getitem__ rolls a NumPy array k times, read by a
DataLoader with two worker processes, and a small model, each step in an NVTX range. Captured on the 2-core machine
without a GPU, under load, with `nsys-transfer run` defaults (CPU sampling, Python stacks) into
tests/data/newcomer/loader_roll_lost_nsys2024.* (as `python infer_w.py 10`, the name the trace shows): nsys lost 9 of its CPU samples.

usage: loader_roll.py [ROLLS]
"""
import sys
import time

import numpy as np
import nvtx
import torch
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = np.random.default_rng(i).random((64, 256), dtype=np.float32)
        acc = np.zeros_like(x)
        for k in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
            acc += np.roll(x, k, axis=1)
        return torch.from_numpy(acc)


def main():
    t0 = time.perf_counter()
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).eval()
    loader = DataLoader(Frames(), batch_size=64, num_workers=2)
    total = 0.0
    with torch.no_grad():
        for step, batch in enumerate(loader):
            if step == 30:
                break
            with nvtx.annotate(f"step {step}"):
                total += float(model(batch).sum())
    print(f"total={total:.2f} wall_s={time.perf_counter() - t0:.2f}")


if __name__ == "__main__":
    main()
