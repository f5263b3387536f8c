"""Toy single-stage detector (ResNet-18 + anchor head) with per-image CPU post-processing.

Boxes and scores come back with .cpu() one image at a time, then top-k, box decoding in numpy and
torchvision.ops.batched_nms on the CPU, like a lot of "quick detector demo" code does.

usage: python det_nms.py [--device cuda] [--batches 150] [--warmup 5] [--batch 16] [--small]
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torchvision
from torchvision.ops import batched_nms

NUM_CLASSES = 20
ANCHORS = [(32, 32), (64, 32), (32, 64), (64, 64), (128, 64), (64, 128), (128, 128), (256, 256), (192, 96)]


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet18(weights=None)
        # stride 16 features (up to layer3)
        self.body = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3)
        self.head = nn.Sequential(nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(256, len(ANCHORS) * (4 + NUM_CLASSES), 1))

    def forward(self, x):
        f = self.head(self.body(x))
        n, _, h, w = f.shape
        f = f.view(n, len(ANCHORS), 4 + NUM_CLASSES, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, 4 + NUM_CLASSES)
        return f[..., :4], f[..., 4:]


def make_anchors(h, w, stride=16):
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    cx = (xs + 0.5) * stride
    cy = (ys + 0.5) * stride
    out = []
    for aw, ah in ANCHORS:
        wh = np.ones_like(cx, dtype=np.float64)
        out.append(np.stack([cx, cy, wh * aw, wh * ah], -1))
    return np.stack(out, 2).reshape(-1, 4).astype(np.float32)


def postprocess(deltas, logits, anchors, score_thr=0.3, topk=1000, iou=0.5):
    # everything here happens on the CPU
    scores = 1 / (1 + np.exp(-logits))
    best = scores.max(1)
    cls = scores.argmax(1)
    keep = np.where(best > score_thr)[0]
    if len(keep) > topk:
        keep = keep[np.argpartition(-best[keep], topk)[:topk]]
    d = deltas[keep]
    a = anchors[keep]
    cx = a[:, 0] + d[:, 0] * 0.1 * a[:, 2]
    cy = a[:, 1] + d[:, 1] * 0.1 * a[:, 3]
    w = a[:, 2] * np.exp(np.clip(d[:, 2] * 0.2, -4, 4))
    h = a[:, 3] * np.exp(np.clip(d[:, 3] * 0.2, -4, 4))
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    kept = batched_nms(torch.from_numpy(boxes), torch.from_numpy(best[keep]), torch.from_numpy(cls[keep]), iou)
    kept = kept[:100].numpy()
    return boxes[kept], best[keep][kept], cls[keep][kept]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--img", type=int, default=640)
    p.add_argument("--small", action="store_true")
    args = p.parse_args()
    if args.small:
        args.batch, args.img = 2, 160
        args.batches = args.batches or 4
        args.warmup = 1 if args.warmup is None else args.warmup
    args.batches = args.batches or 150
    args.warmup = 5 if args.warmup is None else args.warmup
    device = torch.device(args.device)

    torch.manual_seed(0)
    model = Detector().to(device).eval()
    anchors = make_anchors(args.img // 16, args.img // 16)
    images = torch.rand(args.batch, 3, args.img, args.img, device=device)

    n_dets = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.batches):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_steady = time.perf_counter()
            deltas, logits = model(images)
            results = []
            for b in range(images.shape[0]):
                d = deltas[b].cpu().numpy()
                l = logits[b].float().cpu().numpy()
                boxes, scores, classes = postprocess(d, l, anchors)
                results.append((boxes, scores, classes))
                n_dets += len(boxes)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "det_nms", "batches": measured, "wall_s": round(t1 - t0, 3),
                                  "steady_batches_per_s": measured / (t1 - t_steady), "detections": n_dets}))


if __name__ == "__main__":
    main()
