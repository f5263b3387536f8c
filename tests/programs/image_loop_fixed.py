"""image_loop.py with its inputs through prefetch() and its per-step count through GpuScalars.

A Dataset of normalised 3 x 224 x 224 float images (a bank of random ones, so loading is cheap and the copy is what
shows), a DataLoader with 6 workers and no pin_memory, ResNet-50 (random weights); per batch the images go
`.to(device)` (pageable: staged by the driver, the thread blocked) and the accuracy is counted with `.item()`
(a sync every step). Fixed with nsys_transfer.fixes (docs/fixes.md): prefetch() pins each batch
in a background thread and copies it on a side stream ahead of the compute; GpuScalars reads the counts every 50 steps.

usage:  python3 tests/programs/image_loop_fixed.py [--device cuda] [--batches 20] [--batch 256] [--workers 6]
"""
import argparse
import json
import time

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset

from nsys_transfer.fixes import GpuScalars, prefetch


class Images(Dataset):
    """Normalised images and labels, drawn from a bank of 64 random ones (decoded and normalised once)."""

    def __init__(self, n, size):
        g = torch.Generator().manual_seed(0)
        raw = torch.randint(0, 256, (64, 3, size, size), dtype=torch.uint8, generator=g)
        mean, std = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        self.n, self.bank = n, (raw.float() / 255 - mean) / std

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.bank[i % 64], i % 1000


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--img", type=int, default=224)
    p.add_argument("--workers", type=int, default=6, help="DataLoader workers")
    p.add_argument("--ceiling", action="store_true", help="one batch kept on the GPU, nothing read back")
    return p.parse_args()


def start_clock(device):
    """After the warm-up: the GPU's queue drained, then the clock."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def report(args, device, t0, name, correct):
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": name, "ceiling": args.ceiling, "batches": measured, "correct": correct,
                                  "batches_per_s": measured / (start_clock(device) - t0)}))


def ceiling(args, device, loader, model):
    """The same loop with one batch kept on the GPU and nothing read back: what the GPU alone allows."""
    images = None
    with torch.inference_mode():
        for i, (batch, _) in enumerate(loader):
            if i == args.warmup:
                t0 = start_clock(device)
            images = images if images is not None else batch.to(device)
            model(images)
    report(args, device, t0, "image_loop", None)


def main():
    args = arguments()
    device = torch.device(args.device)
    loader = DataLoader(Images(args.batches * args.batch, args.img), batch_size=args.batch, num_workers=args.workers)
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None).to(device).eval()
    if args.ceiling:
        return ceiling(args, device, loader, model)
    counts = GpuScalars(every=50)
    with torch.inference_mode():
        for i, (images, labels) in enumerate(prefetch(loader, device)):
            if i == args.warmup:
                t0 = start_clock(device)
            counts.add(correct=(model(images).argmax(1) == labels).sum())
    correct = int(sum(counts.values()["correct"]))
    report(args, device, t0, "image_loop_fixed", correct)


if __name__ == "__main__":
    main()
