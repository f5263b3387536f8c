"""Export backbone embeddings for an image collection to a table (parquet, or csv if pyarrow is missing).

A timm ResNet-50 (random init, num_classes=0 -> pooled features) or torchvision's if timm is not there.
Features of each batch are put into a DataFrame and concatenated to the running one; a small per-image
summary table is filled row by row with df.loc.
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch

try:
    import timm
except ImportError:
    timm = None
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--batches", type=int, default=None)
ap.add_argument("--warmup", type=int, default=None)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--img", type=int, default=224)
ap.add_argument("--out", default=None)
ap.add_argument("--small", action="store_true")
args = ap.parse_args()
if args.batches is None:
    args.batches = 4 if args.small else 150
if args.warmup is None:
    args.warmup = 1 if args.small else 3
if args.small:
    args.batch, args.img = 4, 64

dev = torch.device(args.device)
arch = "resnet18" if args.small else "resnet50"
if timm is not None:
    model = timm.create_model(arch, pretrained=False, num_classes=0)
else:
    model = getattr(torchvision.models, arch)(weights=None)
    model.fc = torch.nn.Identity()
model = model.to(dev).eval()

try:
    import pyarrow  # noqa: F401
    fmt = "parquet"
except ImportError:
    fmt = "csv"
out_path = args.out or os.path.join(tempfile.mkdtemp(prefix="feat_export_"), "features." + fmt)

# fake image collection: ids + a uint8 bank we pretend to read from
g = torch.Generator().manual_seed(0)
bank = torch.randint(0, 256, (32, 3, args.img, args.img), dtype=torch.uint8, generator=g)
mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)

features = None
summary = pd.DataFrame(columns=["image_id", "norm", "max_dim", "max_val"])
t_start = time.perf_counter()
with torch.no_grad():
    for i in range(args.batches):
        if i == args.warmup:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_steady = time.perf_counter()
        ids = [f"img_{i * args.batch + j:07d}" for j in range(args.batch)]
        idx = torch.arange(i * args.batch, (i + 1) * args.batch) % len(bank)
        x = bank[idx].to(dev).float().div(255)
        x = (x - mean) / std
        f = model(x).cpu().numpy()
        chunk = pd.DataFrame(f, columns=[f"f{k}" for k in range(f.shape[1])])
        chunk.insert(0, "image_id", ids)
        features = chunk if features is None else pd.concat([features, chunk], ignore_index=True)
        for j in range(len(ids)):
            summary.loc[len(summary)] = [ids[j], float(np.linalg.norm(f[j])), int(f[j].argmax()), float(f[j].max())]

if fmt == "parquet":
    features.to_parquet(out_path)
    summary.to_parquet(out_path.replace(".parquet", "_summary.parquet"))
else:
    features.to_csv(out_path, index=False)
    summary.to_csv(out_path.replace(".csv", "_summary.csv"), index=False)
t_end = time.perf_counter()

n = args.batches - args.warmup
print(f"wrote {len(features)} rows x {features.shape[1]} cols to {out_path}")
print("RESULT " + json.dumps({"program": "feature_export", "batches": n, "wall_s": round(t_end - t_start, 3),
                              "steady_batches_per_s": n / (t_end - t_steady), "rows": len(features),
                              "format": fmt, "backbone": "timm" if timm else "torchvision"}))
