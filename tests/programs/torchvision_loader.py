"""A torchvision image-classification inference loop, written the way users write it.

FakeData PIL images (3x256x256) are decoded-like transformed (RandomResizedCrop(224) or Resize+CenterCrop,
ToTensor, Normalize) in DataLoader worker processes (pin_memory=True), a resnet50 with random weights runs
in eval + inference_mode, inputs go `.to(device, non_blocking=True)` and predictions come back with
`.argmax(1).cpu().tolist()`. Each batch's GPU work is in an NVTX range "batch N"; the loader fetch is
outside it, as in real code. Expect the GPU to idle while the main thread waits for the `pt_data_worker`s.

usage:  python3 tests/programs/torchvision_loader.py [--device cuda] [--batches 30] [--batch-size 64] [--workers 2]
trace:  python3 -m nsys_transfer.profiling run -o runs/torchvision_loader --trace cuda,nvtx,osrt --no-capture-range -- \
            python3 tests/programs/torchvision_loader.py --device cuda
        .venv/bin/analyze-trace runs/torchvision_loader.sqlite
(the whole program is captured: no cudaProfilerStart/Stop; the first batches are warm-up.)
"""
import argparse
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=30, help="batches to run (the first --warmup are warm-up)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--eval-transforms", action="store_true", help="Resize+CenterCrop instead of RandomResizedCrop")
    args = p.parse_args()
    device = torch.device(args.device)

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if args.eval_transforms:
        tf = transforms.Compose([transforms.Resize(args.crop + 32), transforms.CenterCrop(args.crop),
                                 transforms.ToTensor(), normalize])
    else:
        tf = transforms.Compose([transforms.RandomResizedCrop(args.crop), transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor(), normalize])
    dataset = torchvision.datasets.FakeData(size=args.batches * args.batch_size,
                                            image_size=(3, args.image_size, args.image_size),
                                            num_classes=1000, transform=tf)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, num_workers=args.workers,
                        pin_memory=device.type == "cuda", persistent_workers=args.workers > 0)

    model = getattr(torchvision.models, args.model)(weights=None).to(device).eval()

    predictions, correct, seen = [], 0, 0
    t_start = None
    with torch.inference_mode():
        for i, (images, labels) in enumerate(loader):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_start = time.perf_counter()
            torch.cuda.nvtx.range_push(f"batch {i}")
            images = images.to(device, non_blocking=True)
            logits = model(images)
            pred = logits.argmax(1).cpu()
            torch.cuda.nvtx.range_pop()
            predictions.extend(pred.tolist())
            correct += (pred == labels).sum().item()
            seen += len(labels)
    elapsed = time.perf_counter() - t_start if t_start else float("nan")
    measured = max(len(loader) - args.warmup, 0)
    print(f"{args.model} {device}: {seen} images in {len(loader)} batches, top-1 {correct / max(seen, 1):.3f} "
          f"(random weights); {measured / elapsed:.2f} batches/s = {measured * args.batch_size / elapsed:.0f} images/s "
          f"after {args.warmup} warm-up batches")


if __name__ == "__main__":
    main()
