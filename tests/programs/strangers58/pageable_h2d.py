"""Training a light 3-D-ish denoiser on big host-resident batches.

The whole (synthetic) dataset sits in ordinary (pageable) host memory as a
list of large float32 batches; every step copies a batch to the GPU with
.to(device) and runs a small conv net on it.

Profiled with a plain `with profile(...)` block (with_stack=True) with
record_function ranges per phase, export_chrome_trace() at the end and a
key_averages() table printed.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    return p.parse_args()


class Denoiser(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(ch, 32, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(32, ch, 4, stride=2, padding=1),
        )

    def forward(self, x):
        return x - self.net(x)


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)

    if args.small:
        n_batches, batch, ch, res, steps = 2, 2, 16, 32, 6
    else:
        # 4 x 64 x 16 x 256 x 256 float32 = 4 x 268 MB in pageable host memory
        n_batches, batch, ch, res, steps = 4, 64, 16, 256, 60

    print("building host dataset ...")
    host_data = [torch.randn(batch, ch, res, res) for _ in range(n_batches)]
    host_noise_level = [torch.rand(batch, 1, 1, 1) * 0.1 for _ in range(n_batches)]

    model = Denoiser(ch).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    t0 = time.perf_counter()
    with profile(activities=activities, with_stack=True) as prof:
        for step in range(steps):
            with record_function("load_batch"):
                clean = host_data[step % n_batches].to(device)
                sigma = host_noise_level[step % n_batches].to(device)
            with record_function("forward"):
                noisy = clean + sigma * torch.randn_like(clean)
                loss = nn.functional.mse_loss(model(noisy), clean)
            with record_function("backward_and_step"):
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    elapsed = time.perf_counter() - t0
    gb = steps * host_data[0].numel() * 4 / 1e9
    print(f"{steps} steps in {elapsed:.2f}s, {gb / elapsed:.1f} GB/s of input moved (profiler on)")

    sort_key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_key, row_limit=12))
    path = os.path.join(args.out, "pageable_h2d.json")
    prof.export_chrome_trace(path)
    print("wrote", path)


if __name__ == "__main__":
    main()
