"""ResNet-50 training with bf16 autocast and channels_last, synthetic data
resident on the GPU (a throughput benchmark of the model itself).

Profiled by creating the profiler object up front and calling prof.start()
at step 10 and prof.stop() after step 15 (no schedule, no context manager),
with record_function ranges per phase; then export_chrome_trace().
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function


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
    torch.backends.cudnn.benchmark = True

    if args.small:
        batch, res, steps, prof_start, prof_stop = 2, 32, 5, 2, 4
    else:
        batch, res, steps, prof_start, prof_stop = 128, 224, 40, 10, 16

    model = torchvision.models.resnet50(weights=None).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, res, res, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    prof = profile(activities=activities)

    t0 = time.perf_counter()
    for step in range(steps):
        if step == prof_start:
            prof.start()
        with record_function("forward"):
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                out = model(images)
                loss = loss_fn(out, labels)
        with record_function("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("optimizer"):
            opt.step()
        if step == prof_stop - 1:
            prof.stop()
        if step % 10 == 9:
            print(f"step {step + 1} loss {loss.item():.3f}")
    elapsed = time.perf_counter() - t0
    print(f"{steps} steps in {elapsed:.2f}s -> {steps * batch / elapsed:.0f} img/s")

    path = os.path.join(args.out, "resnet50_amp.json")
    prof.export_chrome_trace(path)
    print("wrote", path)


if __name__ == "__main__":
    main()
