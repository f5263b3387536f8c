"""Semantic segmentation (DeepLabV3-ResNet50, random weights) with the post-processing done in numpy.

For each batch the logits come back with .cpu().numpy(); softmax, argmax, per-class pixel counts and a
mean confidence per class are computed with numpy, like in a typical evaluation script.
"""
import argparse
import json
import time

import numpy as np
import torch
import torchvision

NUM_CLASSES = 21


def postprocess(logits):
    """logits: (B, C, H, W) float32 numpy -> per-class pixel counts (C,) and confidence sums (C,)."""
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    prob = e / e.sum(axis=1, keepdims=True)
    label = prob.argmax(axis=1)
    conf = prob.max(axis=1)
    counts = np.bincount(label.ravel(), minlength=NUM_CLASSES)
    conf_sum = np.bincount(label.ravel(), weights=conf.ravel(), minlength=NUM_CLASSES)
    return counts, conf_sum


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--img", type=int, default=512)
    p.add_argument("--small", action="store_true")
    a = p.parse_args()
    if a.batches is None:
        a.batches = 4 if a.small else 30
    if a.warmup is None:
        a.warmup = 1 if a.small else 3
    if a.small:
        a.batch, a.img = 2, 64
    return a


def main():
    args = get_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None,
                                                               num_classes=NUM_CLASSES, aux_loss=False)
    model = model.to(device).eval()
    images = [torch.randn(args.batch, 3, args.img, args.img, device=device) for _ in range(4)]

    total_counts = np.zeros(NUM_CLASSES, dtype=np.int64)
    total_conf = np.zeros(NUM_CLASSES)
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.batches):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t1 = time.perf_counter()
            out = model(images[i % 4])["out"]
            logits = out.cpu().numpy()
            counts, conf_sum = postprocess(logits)
            total_counts += counts
            total_conf += conf_sum
    if device.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()

    mean_conf = (total_conf / np.maximum(total_counts, 1)).round(4).tolist()
    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "seg_numpy_post", "batches": n, "wall_s": round(t2 - t0, 3),
                                  "steady_batches_per_s": n / (t2 - t1), "pixels": int(total_counts.sum()),
                                  "mean_conf_first5": mean_conf[:5]}))


if __name__ == "__main__":
    main()
