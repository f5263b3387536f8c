"""Test-time-augmentation style inference with heavy torchvision.transforms.v2 augmentation in the Dataset.

The Dataset returns uint8 CHW tensors (from a bank of random "photos") run through RandomResizedCrop,
flips, ColorJitter (with hue), rotation and normalisation; a DataLoader with num_workers=0 feeds a ResNet-50.
"""
import argparse
import json
import time

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2


class AugmentedImages(Dataset):
    def __init__(self, n, size, out_size):
        g = torch.Generator().manual_seed(0)
        self.bank = torch.randint(0, 256, (48, 3, size, size), dtype=torch.uint8, generator=g)
        self.n = n
        self.tf = v2.Compose([
            v2.RandomResizedCrop(out_size, scale=(0.5, 1.0), antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
            v2.RandomRotation(15),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.tf(self.bank[i % len(self.bank)]), i % 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.batches is None:
        args.batches = 4 if args.small else 24
    if args.warmup is None:
        args.warmup = 1 if args.small else 2
    size, out_size, arch = 288, 224, "resnet50"
    if args.small:
        args.batch = 4
        size, out_size, arch = 96, 64, "resnet18"
    device = torch.device(args.device)

    ds = AugmentedImages(args.batches * args.batch, size, out_size)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=False, num_workers=0)
    model = getattr(torchvision.models, arch)(weights=None).to(device).eval()

    hist = torch.zeros(1000, dtype=torch.long, device=device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i, (images, labels) in enumerate(loader):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t1 = time.perf_counter()
            images = images.to(device)
            preds = model(images).argmax(1)
            hist += torch.bincount(preds, minlength=1000)
    top = hist.argmax().item()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()

    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "augment_loader", "batches": n, "wall_s": round(t2 - t0, 3),
                                  "steady_batches_per_s": n / (t2 - t1), "images": int(hist.sum()),
                                  "most_common_class": top}))


if __name__ == "__main__":
    main()
