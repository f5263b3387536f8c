"""ImageNet-style training with an on-the-fly augmentation pipeline.

Dataset.__getitem__ "decodes" an image (synthetic uint8 tensor) and runs a
torchvision.transforms.v2 augmentation pipeline; the DataLoader uses the
default num_workers=0 and no pin_memory.

Profiled with schedule(wait=1, warmup=1, active=3, repeat=2) and
tensorboard_trace_handler(DIR) -> two trace files, record_shapes=True and
profile_memory=True.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torchvision
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    return p.parse_args()


class SyntheticImageFolder(Dataset):
    def __init__(self, n, src_res, crop, num_classes=1000):
        self.n, self.src_res, self.num_classes = n, src_res, num_classes
        self.transform = v2.Compose([
            v2.RandomResizedCrop(crop, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4),
            v2.GaussianBlur(kernel_size=9, sigma=(0.1, 2.0)),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        img = torch.randint(0, 256, (3, self.src_res, self.src_res), dtype=torch.uint8, generator=g)  # "decode"
        label = idx % self.num_classes
        return self.transform(img), label


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)

    if args.small:
        batch, src_res, crop, steps = 4, 48, 32, 12
    else:
        batch, src_res, crop, steps = 32, 320, 224, 12

    ds = SyntheticImageFolder(n=batch * steps, src_res=src_res, crop=crop)
    loader = DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True)

    model = torchvision.models.resnet18(weights=None).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    t0 = time.perf_counter()
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=2),
        on_trace_ready=tensorboard_trace_handler(args.out),
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for step, (images, targets) in enumerate(loader):
            images = images.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            out = model(images)
            loss = loss_fn(out, targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if step % 4 == 0:
                print(f"step {step}")
    elapsed = time.perf_counter() - t0
    print(f"{steps} steps in {elapsed:.2f}s -> {steps * batch / elapsed:.1f} img/s")


if __name__ == "__main__":
    main()
