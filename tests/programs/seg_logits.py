"""A segmentation job whose full logits go `.cpu()` into CPU post-processing, written the way its users write it.

torchvision's FCN-ResNet101 (random weights, 21 classes) on batches of random 512x512 images; per batch the logits
(16 x 21 x 512 x 512 fp32: 352 MB) come back with `model(x)["out"].cpu().numpy()`, and the CPU turns them into a
uint8 class mask and a per-pixel confidence, saved as .npz (with --out) or serialised to /dev/null.
--dtype bf16 --channels-last --model deeplabv3_resnet50 --batch 64 is the article's configuration in bf16.
The fixed program is seg_logits_fixed.py (docs/fixes.md); --ceiling runs the model alone (no copy, no CPU work).

usage:  python3 tests/programs/seg_logits.py [--device cuda] [--batches 12] [--batch 16] [--out DIR] [--ceiling]
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torchvision


def postprocess(i, logits, out_dir):
    """The CPU side: class mask and confidence of every pixel, saved."""
    mask = logits.argmax(1).astype(np.uint8)
    confidence = logits.max(1).astype(np.float16)
    if out_dir:
        np.savez(os.path.join(out_dir, f"seg_{i:05d}.npz"), mask=mask, confidence=confidence)
    else:
        with open(os.devnull, "wb") as f:
            f.write(mask.tobytes() + confidence.tobytes())


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", default="fcn_resnet101")
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--img", type=int, default=512)
    p.add_argument("--classes", type=int, default=21)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--workers", type=int, default=8, help="output workers (the fixed program)")
    p.add_argument("--out", help="save each batch's results here (.npz)")
    p.add_argument("--ceiling", nargs="?", const="gpu", choices=["gpu", "host"],
                   help="gpu: the model alone, no copy, no post-processing; host: the post-processing alone, on "
                        "--workers processes")
    return p.parse_args()


def setup(args):
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    torch.manual_seed(0)
    model = getattr(torchvision.models.segmentation, args.model)(weights=None, weights_backbone=None,
                                                                 num_classes=args.classes, aux_loss=False)
    model = model.to(device, dtype).to(memory_format=fmt).eval()
    g = torch.Generator(device).manual_seed(0)
    images = [torch.randn(args.batch, 3, args.img, args.img, generator=g, device=device).to(dtype)
              .contiguous(memory_format=fmt) for _ in range(2)]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    return device, model, images


def start_clock(device):
    """After the warm-up: the GPU's queue drained, then the clock."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def report(args, device, t0, name):
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": name, "ceiling": args.ceiling, "batches": measured,
                                  "batches_per_s": measured / (start_clock(device) - t0)}))


def ceiling(args, device, model, images):
    """The model alone, no copy and no CPU work: what the GPU alone allows."""
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                t0 = start_clock(device)
            model(images[i % 2])
    report(args, device, t0, "seg_logits")


_LOGITS = None  # the host ceiling's input, inherited by its forked workers


def _host_job(i):
    postprocess(i, _LOGITS, None)


def host_ceiling(args):
    """The CPU side alone: postprocess() on --workers processes fed random logits of one batch's shape."""
    global _LOGITS
    from concurrent.futures import ProcessPoolExecutor
    _LOGITS = np.random.default_rng(0).standard_normal((args.batch, args.classes, args.img, args.img), np.float32)
    with ProcessPoolExecutor(args.workers) as pool:
        list(pool.map(_host_job, range(args.workers)))
        t0 = time.perf_counter()
        list(pool.map(_host_job, range(args.batches - args.warmup)))
        report(args, torch.device("cpu"), t0, "seg_logits")


def main():
    args = arguments()
    if args.ceiling == "host":
        return host_ceiling(args)
    device, model, images = setup(args)
    if args.ceiling:
        return ceiling(args, device, model, images)
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                t0 = start_clock(device)
            logits = model(images[i % 2])["out"]
            postprocess(i, logits.float().cpu().numpy(), args.out)
    report(args, device, t0, "seg_logits")


if __name__ == "__main__":
    main()
