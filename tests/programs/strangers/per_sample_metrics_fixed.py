"""Validation-style loop with per-sample bookkeeping: accuracy, top-5, per-class hits and a confusion list.

Images and labels sit on the GPU already (a fixed validation batch bank); the metrics are gathered in a
plain Python loop over the samples of each batch, reading each prediction and label with .item().
"""
import argparse
import json
import time
from collections import Counter

import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--batches", type=int, default=None)
parser.add_argument("--warmup", type=int, default=None)
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--img", type=int, default=160)
parser.add_argument("--small", action="store_true")
args = parser.parse_args()
if args.batches is None:
    args.batches = 4 if args.small else 500
if args.warmup is None:
    args.warmup = 1 if args.small else 5
if args.small:
    args.batch, args.img = 8, 64

device = torch.device(args.device)
torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None, num_classes=100).to(device).eval()
bank_x = torch.randn(4, args.batch, 3, args.img, args.img, device=device)
bank_y = torch.randint(0, 100, (4, args.batch), device=device)

correct = 0
top5_correct = 0
seen = 0
per_class_hits = Counter()
per_class_total = Counter()
confusions = Counter()

t_start = time.perf_counter()
with torch.no_grad():
    for b in range(args.batches):
        if b == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t_steady = time.perf_counter()
        images, labels = bank_x[b % 4], bank_y[b % 4]
        logits = model(images)
        preds = logits.argmax(dim=1)
        top5 = logits.topk(5, dim=1).indices
        # one copy to the host per batch; the per-sample loop below then reads CPU tensors
        preds, labels, top5 = preds.cpu(), labels.cpu(), top5.cpu()
        for i in range(len(preds)):
            y = labels[i].item()
            per_class_total[y] += 1
            if preds[i].item() == labels[i].item():
                correct += 1
                per_class_hits[y] += 1
            else:
                confusions[(y, preds[i].item())] += 1
            if y in top5[i]:
                top5_correct += 1
            seen += 1
if device.type == "cuda":
    torch.cuda.synchronize()
t_end = time.perf_counter()

worst = sorted(per_class_total, key=lambda c: per_class_hits[c] / per_class_total[c])[:3]
n = args.batches - args.warmup
print("RESULT " + json.dumps({"program": "per_sample_metrics_fixed", "batches": n, "wall_s": round(t_end - t_start, 3),
                              "steady_batches_per_s": n / (t_end - t_steady), "samples": seen,
                              "top1": correct / seen, "top5": top5_correct / seen, "worst_classes": worst}))
