"""seg_numpy_post.py with the numpy post-processing moved to a pool of worker processes.

The main process only runs the model and hands each batch's CPU logits to a torch.multiprocessing
queue (the tensor goes through shared memory); N worker processes do the same numpy softmax / argmax /
per-class counts and send the small results back. Timing includes draining the queue and joining.
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.multiprocessing as mp
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


def worker(in_q, out_q):
    torch.set_num_threads(1)
    while True:
        item = in_q.get()
        if item is None:
            break
        i, logits = item
        counts, conf_sum = postprocess(logits.numpy())
        del logits
        out_q.put((i, counts, conf_sum))


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--img", type=int, default=512)
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--small", action="store_true")
    a = p.parse_args()
    if a.batches is None:
        a.batches = 4 if a.small else 30
    if a.warmup is None:
        a.warmup = 1 if a.small else 3
    if a.small:
        a.batch, a.img, a.workers = 2, 64, 2
    return a


def main():
    args = get_args()
    device = torch.device(args.device)
    ctx = mp.get_context("spawn")
    in_q, out_q = ctx.Queue(maxsize=2 * args.workers), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(in_q, out_q), daemon=True) for _ in range(args.workers)]
    for pr in procs:
        pr.start()

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
            in_q.put((i, out.cpu()))
    for _ in procs:
        in_q.put(None)
    for _ in range(args.batches):
        _, counts, conf_sum = out_q.get()
        total_counts += counts
        total_conf += conf_sum
    for pr in procs:
        pr.join()
    t2 = time.perf_counter()

    mean_conf = (total_conf / np.maximum(total_counts, 1)).round(4).tolist()
    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "seg_numpy_post_mpfix", "batches": n, "wall_s": round(t2 - t0, 3),
                                  "steady_batches_per_s": n / (t2 - t1), "pixels": int(total_counts.sum()),
                                  "mean_conf_first5": mean_conf[:5], "workers": args.workers}))


if __name__ == "__main__":
    main()
