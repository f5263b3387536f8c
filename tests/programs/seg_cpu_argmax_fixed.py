"""seg_cpu_argmax.py with its logits through OutputPipeline: the CPU argmax moves out of the loop into workers.

torchvision's DeepLabV3-ResNet50 (random weights, 21 classes) on batches of random 512x512 images made on the GPU.
Per batch, inside an NVTX range `batch N` (no finer ranges): the forward, the logits `.cpu()` (16 x 21 x 512 x 512
fp32: 352 MB), then `logits.argmax(1)` on the CPU (a torch CPU op) and a small statistic of the mask (the share of
pixels of each class, on a subsample). The GPU then waits for the CPU's argmax on the launching thread.

Fixed with nsys_transfer.fixes.OutputPipeline (docs/fixes.md): the copy on a side stream into pinned buffers, the
argmax and the statistic in --workers processes (each batch's shares in a shared row), while the GPU runs on.

usage:  python3 tests/programs/seg_cpu_argmax_fixed.py [--device cuda] [--batches 10] [--warmup 2] [--batch 16]
        [--img 512] [--dtype fp32|fp16] [--ceiling]
"""
import json
import time

import torch
import torchvision
from seg_cpu_argmax import arguments, ceiling  # the same program, its options and its ceiling

from nsys_transfer.fixes import OutputPipeline


def main():
    args = arguments()
    device = torch.device(args.device)
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    torch.manual_seed(0)
    model = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None,
                                                               num_classes=args.classes)
    model = model.to(device, dtype).eval()
    images = torch.randn(args.batch, 3, args.img, args.img, device=device, dtype=dtype)
    if args.ceiling:
        return ceiling(args, model, images)
    rows = torch.zeros(args.batches, args.classes, dtype=torch.float64).share_memory_()

    def process(i, logits):
        mask = logits.argmax(1)  # on the CPU
        sub = mask[:, ::8, ::8].flatten()
        rows[i] = torch.bincount(sub, minlength=args.classes).double() / sub.numel()
    with torch.inference_mode(), OutputPipeline(process, workers=args.workers, tensors=True) as outputs:
        for i in range(args.batches):
            if i == args.warmup:
                outputs.flush()
                t0 = time.perf_counter()
            torch.cuda.nvtx.range_push(f"batch {i}")
            outputs.submit(i, model(images)["out"])
            torch.cuda.nvtx.range_pop()
    shares = rows.sum(0)
    seconds = time.perf_counter() - t0
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "seg_cpu_argmax_fixed", "dtype": args.dtype, "batches": measured,
                                  "largest_class_share": float(shares.max() / args.batches),
                                  "batches_per_s": measured / seconds}))


if __name__ == "__main__":
    main()
