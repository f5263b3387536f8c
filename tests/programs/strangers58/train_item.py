"""Small image-classifier training loop (ResNet-18 on 64x64 synthetic images).

Profiled the "tutorial" way: one `with torch.profiler.profile(...)` block around
the training loop, then export_chrome_trace().  The loop logs the loss and the
batch accuracy every step with .item().
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torchvision
from torch.profiler import ProfilerActivity, profile


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
        batch, res, steps = 4, 32, 5
    else:
        batch, res, steps = 128, 64, 80

    model = torchvision.models.resnet18(weights=None, num_classes=10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()

    # synthetic "dataset" already living on the device
    images = torch.randn(4, batch, 3, res, res, device=device)
    labels = torch.randint(0, 10, (4, batch), device=device)

    def train_step(i):
        x, y = images[i % 4], labels[i % 4]
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return out, y, loss

    # a few warm-up steps before profiling
    for i in range(3):
        train_step(i)

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    running_loss, running_acc = 0.0, 0.0
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for step in range(steps):
            out, y, loss = train_step(step)
            running_loss += loss.item()
            running_acc += (out.argmax(dim=1) == y).float().mean().item()
            if step % 20 == 0:
                print(f"step {step:4d}  loss {running_loss / (step + 1):.4f}  acc {running_acc / (step + 1):.3f}")
    elapsed = time.perf_counter() - t0
    print(f"{steps} steps in {elapsed:.2f}s ({steps * batch / elapsed:.0f} img/s, profiler on)")

    sort_key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_key, row_limit=15))
    path = os.path.join(args.out, "train_item.json")
    prof.export_chrome_trace(path)
    print("wrote", path)


if __name__ == "__main__":
    main()
