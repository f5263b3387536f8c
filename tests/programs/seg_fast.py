"""A fast segmentation loop, written the way its users write it: fp16, channels_last, cuDNN autotuning, all on the GPU.

torchvision's DeepLabV3-ResNet50 (random weights, 21 classes) in fp16 and channels_last with
`torch.backends.cudnn.benchmark = True`, on batches of random 512x512 images made on the GPU (no input copy).
Per step, inside an NVTX range `step N`: the forward, the argmax on the GPU and a per-class pixel count
(`torch.histc`, no sync) added up on the GPU; only the counts (21 floats) are read back, once, at the end. The whole
program is meant to be traced: the model build, cuDNN's autotuning and the first step come before a GPU-bound
steady state.

usage:  python3 tests/programs/seg_fast.py [--device cuda] [--steps 16] [--warmup 3] [--batch 16] [--img 512]
        [--dtype fp16|fp32]
"""
import argparse
import json
import time

import torch
import torchvision


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--warmup", type=int, default=3, help="steps before the clock starts")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--img", type=int, default=512)
    p.add_argument("--classes", type=int, default=21)
    p.add_argument("--dtype", default="fp16", choices=["fp16", "fp32"])
    return p.parse_args()


def main():
    args = arguments()
    device = torch.device(args.device)
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None,
                                                               num_classes=args.classes)
    model = model.half() if dtype == torch.float16 else model
    model = model.to(device).to(memory_format=torch.channels_last).eval()
    images = torch.randn(args.batch, 3, args.img, args.img, device=device, dtype=dtype)
    images = images.contiguous(memory_format=torch.channels_last)
    counts = torch.zeros(args.classes, device=device)
    with torch.inference_mode():
        for i in range(args.steps):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            torch.cuda.nvtx.range_push(f"step {i}")
            out = model(images)["out"]
            pred = out.argmax(1)
            counts += torch.histc(pred.float(), bins=args.classes, min=0, max=args.classes - 1)  # no sync
            torch.cuda.nvtx.range_pop()
        counts = counts.cpu()  # the only read-back: 21 numbers
    seconds = time.perf_counter() - t0
    measured = args.steps - args.warmup
    print("RESULT " + json.dumps({"program": "seg_fast", "dtype": args.dtype, "batch": args.batch, "steps": measured,
                                  "pixels": int(counts.sum()), "steps_per_s": measured / seconds,
                                  "images_per_s": measured * args.batch / seconds}))


if __name__ == "__main__":
    main()
