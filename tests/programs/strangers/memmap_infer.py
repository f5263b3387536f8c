"""Batch scoring of sensor windows stored in a .npy file (memory-mapped), predictions written to another .npy.

At start a synthetic dataset of N windows (4 channels x 1024 samples, float32) is written to a temp dir.
The loop samples a shuffled batch of row indices, gathers them from the memmap, builds a tensor with
torch.tensor(...) and sends it to the device; a 1-D CNN scores it; scores go back into an output memmap.
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

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--batches", type=int, default=None)
ap.add_argument("--warmup", type=int, default=None)
ap.add_argument("--batch", type=int, default=1024)
ap.add_argument("--rows", type=int, default=24000)
ap.add_argument("--small", action="store_true")
args = ap.parse_args()
if args.batches is None:
    args.batches = 5 if args.small else 500
if args.warmup is None:
    args.warmup = 1 if args.small else 5
if args.small:
    args.batch, args.rows = 32, 512

CH, T, NCLS = 4, 1024, 10
workdir = tempfile.mkdtemp(prefix="sensors_")
data_path = os.path.join(workdir, "windows.npy")
rng = np.random.default_rng(0)
mm = np.lib.format.open_memmap(data_path, mode="w+", dtype=np.float32, shape=(args.rows, CH, T))
for s in range(0, args.rows, 2048):
    e = min(s + 2048, args.rows)
    t = np.linspace(0, 20, T, dtype=np.float32)
    mm[s:e] = np.sin(t * rng.uniform(0.5, 5, size=(e - s, CH, 1))) + 0.2 * rng.standard_normal((e - s, CH, T))
mm.flush()
del mm
data = np.load(data_path, mmap_mode="r")
scores_out = np.lib.format.open_memmap(os.path.join(workdir, "scores.npy"), mode="w+", dtype=np.float32,
                                       shape=(args.batches * args.batch, NCLS))

device = torch.device(args.device)
torch.manual_seed(0)
w = 32 if args.small else 128
model = nn.Sequential(
    nn.Conv1d(CH, w, 7, stride=2, padding=3), nn.BatchNorm1d(w), nn.ReLU(),
    nn.Conv1d(w, w, 5, stride=2, padding=2), nn.BatchNorm1d(w), nn.ReLU(),
    nn.Conv1d(w, 2 * w, 5, stride=2, padding=2), nn.BatchNorm1d(2 * w), nn.ReLU(),
    nn.Conv1d(2 * w, 2 * w, 3, stride=2, padding=1), nn.BatchNorm1d(2 * w), nn.ReLU(),
    nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(2 * w, NCLS),
).to(device).eval()

order = rng.permutation(args.rows)
t0 = time.perf_counter()
with torch.no_grad():
    for i in range(args.batches):
        if i == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter()
        idx = np.sort(order[(np.arange(args.batch) + i * args.batch) % args.rows])
        batch = data[idx]                              # gather from the memmap
        x = torch.tensor(batch).to(device)
        x = (x - x.mean(dim=2, keepdim=True)) / (x.std(dim=2, keepdim=True) + 1e-6)
        probs = model(x).softmax(1)
        scores_out[i * args.batch:(i + 1) * args.batch] = probs.cpu().numpy()
scores_out.flush()
if device.type == "cuda":
    torch.cuda.synchronize()
t2 = time.perf_counter()

pred_hist = np.bincount(np.asarray(scores_out).argmax(1), minlength=NCLS).tolist()
del scores_out, data
shutil.rmtree(workdir)
n = args.batches - args.warmup
print("RESULT " + json.dumps({"program": "memmap_infer", "batches": n, "wall_s": round(t2 - t0, 3),
                              "steady_batches_per_s": n / (t2 - t1), "pred_hist": pred_hist}))
