"""Batch organ segmentation of CT volumes with a small 3D U-Net. Volumes come
from the preprocessed cache (float32, HU already windowed and scaled), the net
runs at 2 mm on a 2x-downsampled grid, logits are upsampled back to the 1 mm
grid and we report voxel counts per label for every study.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def block(cin, cout):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01, inplace=True),
        nn.Conv3d(cout, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01, inplace=True),
    )


class UNet3D(nn.Module):
    def __init__(self, n_classes=4, base=16):
        super().__init__()
        self.e1, self.e2, self.e3 = block(1, base), block(base, 2 * base), block(2 * base, 4 * base)
        self.up2 = nn.ConvTranspose3d(4 * base, 2 * base, 2, stride=2)
        self.d2 = block(4 * base, 2 * base)
        self.up1 = nn.ConvTranspose3d(2 * base, base, 2, stride=2)
        self.d1 = block(2 * base, base)
        self.out = nn.Conv3d(base, n_classes, 1)

    def forward(self, x):
        s1 = self.e1(x)
        s2 = self.e2(F.max_pool3d(s1, 2))
        b = self.e3(F.max_pool3d(s2, 2))
        d2 = self.d2(torch.cat([self.up2(b), s2], 1))
        d1 = self.d1(torch.cat([self.up1(d2), s1], 1))
        return self.out(d1)


class VolumeCache(Dataset):
    """Stand-in for the on-disk cache: a handful of synthetic volumes, served by index."""

    def __init__(self, n, shape, n_unique=6, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.vols = torch.randn((n_unique, 1) + shape, generator=g).clamp_(-3, 3)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.vols[i % len(self.vols)], i


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny sizes for a quick CPU check")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    args = p.parse_args()
    batches = args.batches or (6 if args.small else 80)
    warmup = args.warmup if args.warmup is not None else (2 if args.small else 5)
    bs, shape, workers = (2, (16, 32, 32), 2) if args.small else (4, (128, 192, 192), 6)
    n_classes = 4

    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = UNet3D(n_classes).to(dev).eval()
    loader = DataLoader(VolumeCache(batches * bs, shape), batch_size=bs, num_workers=workers)
    use_amp = dev.type == "cuda"
    classes = torch.arange(n_classes, device=dev).view(1, -1, 1, 1, 1)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    counts = {}
    t0 = time.perf_counter()
    for i, (vols, study_ids) in enumerate(loader):
        if i == warmup:
            sync()
            t_steady = time.perf_counter()
        vols = vols.to(dev)
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.float16, enabled=use_amp):
            low = F.avg_pool3d(vols, 2)
            logits = model(low)
            logits = F.interpolate(logits.float(), size=shape, mode="trilinear", align_corners=False)
            labels = logits.argmax(dim=1)
            per_study = (labels.unsqueeze(1) == classes).sum(dim=(2, 3, 4))
        for sid, c in zip(study_ids.tolist(), per_study.cpu().tolist()):
            counts[sid] = c
    sync()
    t_end = time.perf_counter()

    totals = [sum(c[k] for c in counts.values()) for k in range(n_classes)]
    n_meas = batches - warmup
    print("RESULT " + json.dumps({
        "program": "ct_volume_segment",
        "batches": n_meas,
        "wall_s": round(t_end - t0, 4),
        "steady_batches_per_s": round(n_meas / (t_end - t_steady), 4),
        "studies": len(counts),
        "voxels_per_label": totals,
    }))


if __name__ == "__main__":
    main()
