"""seg_cpu_argmax.py with its logits through OutputPipeline: the CPU argmax moves out of the loop into workers.

The program is seg_cpu_argmax.py's (DeepLabV3-ResNet50, 352 MB of fp32 logits a batch, an NVTX range `batch N`),
whose GPU waited for the CPU's argmax on the launching thread.

Fixed with nsys_transfer.fixes.OutputPipeline (docs/fixes.md): the copy on a side stream into pinned buffers, the
argmax and the statistic in --workers processes (each batch's shares in a shared row), while the GPU runs on.

usage:  python3 tests/programs/seg_cpu_argmax_fixed.py [--device cuda] [--batches 10] [--warmup 2] [--batch 16]
        [--img 512] [--dtype fp32|fp16] [--ceiling]
"""
import time

import torch
from seg_cpu_argmax import arguments, ceiling, class_shares, report, setup  # the same program's parts

from nsys_transfer.fixes import OutputPipeline


def main():
    args = arguments()
    model, images = setup(args)
    if args.ceiling:
        return ceiling(args, model, images)
    rows = torch.zeros(args.batches, args.classes, dtype=torch.float64).share_memory_()

    def process(i, logits):
        rows[i] = class_shares(logits, args.classes)
    with torch.inference_mode(), OutputPipeline(process, workers=args.workers, tensors=True) as outputs:
        for i in range(args.batches):
            if i == args.warmup:
                outputs.flush()
                t0 = time.perf_counter()
            torch.cuda.nvtx.range_push(f"batch {i}")
            outputs.submit(i, model(images)["out"])
            torch.cuda.nvtx.range_pop()
    report("seg_cpu_argmax_fixed", args, rows.sum(0), time.perf_counter() - t0)


if __name__ == "__main__":
    main()
