"""A segmentation job that takes its class masks on the CPU, written the way its users write it.

torchvision's DeepLabV3-ResNet50 (random weights, 21 classes) on batches of random 512x512 images made on the GPU.
Per batch, inside an NVTX range `batch N` (no finer ranges): the forward, the logits `.cpu()` (16 x 21 x 512 x 512
fp32: 352 MB), then `logits.argmax(1)` on the CPU (a torch CPU op) and a small statistic of the mask (the share of
pixels of each class, on a subsample). The GPU then waits for the CPU's argmax on the launching thread.

The fixed program is seg_cpu_argmax_fixed.py (the argmax in OutputPipeline's workers); --ceiling runs the model
alone (no copy, no argmax).

usage:  python3 tests/programs/seg_cpu_argmax.py [--device cuda] [--batches 10] [--warmup 2] [--batch 16]
        [--img 512] [--dtype fp32|fp16] [--ceiling]
"""
import argparse
import json
import time

import torch
import torchvision


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="batches before the clock starts")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--img", type=int, default=512)
    p.add_argument("--classes", type=int, default=21)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "fp16"])
    p.add_argument("--workers", type=lambda x: x if x == "auto" else int(x), default=8,
                   help="output workers of the fixed program (a number, or auto: sized from the backlog)")
    p.add_argument("--ceiling", action="store_true", help="the model alone: no copy, no argmax")
    return p.parse_args()


def ceiling(args, model, images):
    """The forward alone, timed as the loop: what the GPU allows."""
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            model(images)["out"]
    torch.cuda.synchronize()
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "seg_cpu_argmax", "ceiling": True, "batches": measured,
                                  "batches_per_s": measured / (time.perf_counter() - t0)}))


def setup(args):
    """The model on the device and one batch of random images made there."""
    device = torch.device(args.device)
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    torch.manual_seed(0)
    model = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None,
                                                               num_classes=args.classes)
    model = model.to(device, dtype).eval()
    return model, torch.randn(args.batch, 3, args.img, args.img, device=device, dtype=dtype)


def class_shares(logits, classes):
    """The CPU argmax of one batch's logits, and the share of each class on a subsample of the mask."""
    mask = logits.argmax(1)  # on the CPU
    sub = mask[:, ::8, ::8].flatten()
    return torch.bincount(sub, minlength=classes).double() / sub.numel()


def report(name, args, shares, seconds):
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": name, "dtype": args.dtype, "batches": measured,
                                  "largest_class_share": float(shares.max() / args.batches),
                                  "batches_per_s": measured / seconds}))


def main():
    args = arguments()
    model, images = setup(args)
    if args.ceiling:
        return ceiling(args, model, images)
    shares = torch.zeros(args.classes, dtype=torch.float64)
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                t0 = time.perf_counter()
            torch.cuda.nvtx.range_push(f"batch {i}")
            logits = model(images)["out"]
            logits = logits.cpu()
            shares += class_shares(logits, args.classes)
            torch.cuda.nvtx.range_pop()
    report("seg_cpu_argmax", args, shares, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
