"""Image-to-image inference (a small U-Net-ish enhancer, random weights) that saves every result as PNG.

Each batch of low-res inputs is upscaled x2 by the network; every output image is converted to uint8
on the CPU and written with PIL Image.save(..., "PNG") from the main loop.
"""
import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
from PIL import Image


def conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.LeakyReLU(0.1))


class Enhancer(nn.Module):
    def __init__(self, w=32):
        super().__init__()
        self.enc1 = conv(3, w)
        self.enc2 = nn.Sequential(nn.MaxPool2d(2), conv(w, 2 * w), conv(2 * w, 2 * w))
        self.up = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec = nn.Sequential(conv(2 * w, w), conv(w, w))
        self.upsample = nn.Sequential(nn.Conv2d(w, 3 * 4, 3, padding=1), nn.PixelShuffle(2))

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        d = self.dec(torch.cat([self.up(e2), e1], 1))
        base = nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return (base + self.upsample(d)).clamp(0, 1)


ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--batches", type=int, default=None)
ap.add_argument("--warmup", type=int, default=None)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--img", type=int, default=256, help="input size; outputs are twice that")
ap.add_argument("--outdir", default=None)
ap.add_argument("--keep", action="store_true", help="keep the written PNGs")
ap.add_argument("--small", action="store_true")
args = ap.parse_args()
if args.batches is None:
    args.batches = 4 if args.small else 30
if args.warmup is None:
    args.warmup = 1 if args.small else 2
if args.small:
    args.batch, args.img = 2, 48

device = torch.device(args.device)
outdir = args.outdir or tempfile.mkdtemp(prefix="enhanced_")
os.makedirs(outdir, exist_ok=True)
torch.manual_seed(0)
model = Enhancer(16 if args.small else 32).to(device).eval()

# inputs: smooth random "photos" (low-frequency noise, upsampled) plus a bit of grain
low = torch.rand(8, 3, args.img // 8, args.img // 8)
inputs = nn.functional.interpolate(low, size=(args.img, args.img), mode="bicubic").clamp(0, 1)
inputs = (inputs + 0.03 * torch.randn_like(inputs)).clamp(0, 1).to(device)

written = 0
bytes_written = 0
t0 = time.perf_counter()
with torch.no_grad():
    for i in range(args.batches):
        if i == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter()
        x = inputs[torch.arange(args.batch) % len(inputs)]
        y = model(x)
        for j in range(y.shape[0]):
            arr = (y[j].permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
            path = os.path.join(outdir, f"out_{i:04d}_{j:02d}.png")
            Image.fromarray(arr).save(path, "PNG")
            written += 1
            bytes_written += os.path.getsize(path)
if device.type == "cuda":
    torch.cuda.synchronize()
t2 = time.perf_counter()

if not args.keep and args.outdir is None:
    shutil.rmtree(outdir)
n = args.batches - args.warmup
print("RESULT " + json.dumps({"program": "save_png", "batches": n, "wall_s": round(t2 - t0, 3),
                              "steady_batches_per_s": n / (t2 - t1), "images": written,
                              "mb_written": round(bytes_written / 1e6, 1)}))
