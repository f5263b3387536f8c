"""Large bf16 matrix-multiply job (a deep linear projection stack applied to a
big activation block), e.g. offline feature projection. Data and weights live
on the GPU, no host round-trips inside the loop.

Profiled with schedule(wait=1, warmup=1, active=3, repeat=1) and a custom
on_trace_ready handler that prints a key_averages() table and writes
gemm_step<N>.json with export_chrome_trace(); record_shapes=True and
with_flops=True, no record_function.
"""
import argparse
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)

    if args.small:
        n, depth, steps = 256, 4, 8
    else:
        n, depth, steps = 8192, 16, 120

    dtype = torch.bfloat16
    weights = [torch.randn(n, n, device=device, dtype=dtype) / n ** 0.5 for _ in range(depth)]
    x0 = torch.randn(n, n, device=device, dtype=dtype)

    def step_fn(x):
        for w in weights:
            x = torch.relu(x @ w) * 1.4142
        return x

    def on_ready(p):
        sort_key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
        print(p.key_averages().table(sort_by=sort_key, row_limit=10))
        path = os.path.join(args.out, f"gemm_step{p.step_num}.json")
        p.export_chrome_trace(path)
        print("wrote", path)

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    t0 = time.perf_counter()
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=on_ready,
        record_shapes=True,
        with_flops=True,
    ) as prof:
        acc = torch.zeros((), device=device, dtype=torch.float32)
        for step in range(steps):
            y = step_fn(x0)
            acc += y.float().mean()
            prof.step()
    checksum = acc.item()
    elapsed = time.perf_counter() - t0
    flops = steps * depth * 2 * n ** 3
    print(f"{steps} steps in {elapsed:.2f}s -> {flops / elapsed / 1e12:.1f} TFLOP/s (checksum {checksum:.3f})")


if __name__ == "__main__":
    main()
