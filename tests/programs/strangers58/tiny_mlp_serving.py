"""Online scoring of single requests with a small residual MLP (batch size 1).

Everything is inside the profiler: building the model and moving it to the
device, a short warm-up, then the request loop. Results are kept on the device
and fetched once at the end.

Profiled with one `with torch.profiler.profile(...)` block (record_shapes=True)
wrapping the whole program body, then export_chrome_trace(); no
record_function ranges.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Scorer(nn.Module):
    def __init__(self, d_in, d, depth, n_out):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(depth)])
        self.out = nn.Linear(d, n_out)

    def forward(self, x):
        return torch.softmax(self.out(self.blocks(self.inp(x))), dim=-1)


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)

    if args.small:
        d_in, d, depth, n_out, n_requests, n_warmup = 32, 64, 2, 8, 50, 5
    else:
        d_in, d, depth, n_out, n_requests, n_warmup = 128, 256, 8, 16, 800, 20

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    with profile(activities=activities, record_shapes=True) as prof:
        model = Scorer(d_in, d, depth, n_out).to(device).eval()
        requests = torch.randn(n_requests, 1, d_in).to(device)

        with torch.no_grad():
            for i in range(n_warmup):
                model(requests[i])

            outputs = []
            t0 = time.perf_counter()
            for i in range(n_requests):
                outputs.append(model(requests[i]))
            scores = torch.cat(outputs).cpu()
            elapsed = time.perf_counter() - t0

    print(f"{n_requests} requests in {elapsed:.3f}s -> {1e6 * elapsed / n_requests:.0f} us/request (profiler on)")
    print("mean top score:", scores.max(dim=-1).values.mean().item())
    path = os.path.join(args.out, "tiny_mlp_serving.json")
    prof.export_chrome_trace(path)
    print("wrote", path)


if __name__ == "__main__":
    main()
