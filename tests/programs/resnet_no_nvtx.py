"""An image-classification loop without any NVTX range, written the way its users write it.

torchvision's ResNet-50 (random weights) in fp32 with `torch.backends.cudnn.benchmark = True`; ~40 batches of
64 x 3 x 224 x 224 images from a few pinned CPU buffers, each copied with `.to(device, non_blocking=True)`; the
predicted classes stay on the GPU until one `torch.cuda.synchronize()` and a read-back at the end. No NVTX at all:
a trace of it has no steps to go by, only the kernel stream (cuDNN's autotuning at the start, then the same
kernels every batch).

usage:  python3 tests/programs/resnet_no_nvtx.py [--device cuda] [--batches 40] [--warmup 5] [--batch 64] [--img 224]
"""
import argparse
import json
import time

import torch
import torchvision


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5, help="batches before the clock starts")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--img", type=int, default=224)
    p.add_argument("--buffers", type=int, default=4, help="pinned input batches, used in turn")
    return p.parse_args()


def main():
    args = arguments()
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).to(device).eval()
    pin = device.type == "cuda"
    inputs = [torch.randn(args.batch, 3, args.img, args.img).pin_memory() if pin else
              torch.randn(args.batch, 3, args.img, args.img) for _ in range(args.buffers)]
    preds = []
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            x = inputs[i % args.buffers].to(device, non_blocking=True)
            preds.append(model(x).argmax(1))
        if device.type == "cuda":
            torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    classes = torch.cat(preds).cpu()
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "resnet_no_nvtx", "batches": measured, "images": int(classes.numel()),
                                  "batches_per_s": measured / seconds, "images_per_s": measured * args.batch / seconds}))


if __name__ == "__main__":
    main()
