"""Semantic-segmentation inference service (FCN-ResNet50, random weights).

Each batch: normalize on the device, run the model, then copy the full logits
back to the host and post-process with numpy (argmax mask, per-class pixel
histogram, mean confidence).

Profiled with a schedule + tensorboard_trace_handler(use_gzip=True) and
record_function ranges around the three phases.
"""
import argparse
import os
import time

import numpy as np
import torch
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

NUM_CLASSES = 21


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    return p.parse_args()


def postprocess(logits_np):
    # logits_np: (B, C, H, W) float32 numpy array
    e = np.exp(logits_np - logits_np.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    mask = probs.argmax(axis=1)
    conf = probs.max(axis=1).mean()
    hist = np.bincount(mask.ravel(), minlength=NUM_CLASSES)
    return mask.astype(np.uint8), hist, float(conf)


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)

    if args.small:
        batch, res, iters = 1, 96, 6
    else:
        batch, res, iters = 4, 512, 12

    model = torchvision.models.segmentation.fcn_resnet50(
        weights=None, weights_backbone=None, num_classes=NUM_CLASSES, aux_loss=False
    ).to(device).eval()

    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
    # a small pool of "camera frames" (uint8) on the host
    frames = [torch.randint(0, 256, (batch, 3, res, res), dtype=torch.uint8) for _ in range(3)]

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    total_hist = np.zeros(NUM_CLASSES, dtype=np.int64)
    t0 = time.perf_counter()
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=tensorboard_trace_handler(args.out, use_gzip=True),
    ) as prof:
        with torch.inference_mode():
            for it in range(iters):
                with record_function("preprocess"):
                    x = frames[it % len(frames)].to(device)
                    x = (x.float() / 255.0 - mean) / std
                with record_function("forward"):
                    logits = model(x)["out"]
                with record_function("postprocess"):
                    logits_np = logits.cpu().numpy()
                    mask, hist, conf = postprocess(logits_np)
                    total_hist += hist
                print(f"iter {it:3d} mean confidence {conf:.3f}  mask {mask.shape}")
                prof.step()
    elapsed = time.perf_counter() - t0
    print(f"{iters} batches in {elapsed:.2f}s -> {iters * batch / elapsed:.1f} frames/s")
    print("class histogram:", total_hist.tolist())


if __name__ == "__main__":
    main()
