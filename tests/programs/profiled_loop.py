"""An inference loop as a torch.profiler user writes it: a ResNet over batches of images, the logits copied to the host
and post-processed there, and, with --torch-profiler DIR, the profiler's five lines around the loop (a schedule,
with_stack=True, one prof.step() per batch) writing a Kineto trace into DIR. Without the flag it runs the same loop
unprofiled, or under nsys: the same program seen by both profilers (issue 51).

    --post numpy   the logits to the host (pageable .cpu()) and softmax + argmax in numpy, each batch
    --post items   per-sample .item() reads of the predictions in a Python loop (a sync for each)

Prints `RESULT {...}` last (wall_s over all batches, steady_batches_per_s after the warm-up).
"""
import argparse
import json
import time

import numpy as np
import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--post", choices=("numpy", "items"), default="numpy")
parser.add_argument("--batches", type=int, default=12)
parser.add_argument("--warmup", type=int, default=2)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--img", type=int, default=224)
parser.add_argument("--torch-profiler", metavar="DIR", help="record a Kineto trace of batches 2-6 into DIR")
args = parser.parse_args()

device = torch.device(args.device)
torch.manual_seed(0)
model = torchvision.models.resnet50(weights=None, num_classes=1000).to(device).eval()
images = torch.randn(args.batch, 3, args.img, args.img)  # a host batch, copied in each step as a loader's would be


def postprocess(logits: torch.Tensor) -> tuple[int, float]:
    if args.post == "items":
        preds = logits.argmax(dim=1)
        hits = sum(1 for i in range(len(preds)) if preds[i].item() % 2 == 0)
        return hits, 0.0
    z = logits.cpu().numpy()
    z = np.exp(z - z.max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    return int((p.argmax(axis=1) % 2 == 0).sum()), float(p.max(axis=1).mean())


def run(prof=None):
    hits, t_steady = 0, None
    t0 = time.perf_counter()
    with torch.no_grad():
        for b in range(args.batches):
            if b == args.warmup:
                t_steady = time.perf_counter()
            with torch.profiler.record_function("forward"):
                logits = model(images.to(device))
            with torch.profiler.record_function("postprocess"):
                hits += postprocess(logits)[0]
            if prof is not None:
                prof.step()
    t1 = time.perf_counter()
    return hits, t1 - t0, (args.batches - args.warmup) / (t1 - t_steady)


if args.torch_profiler:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, with_stack=True,
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=5, repeat=1),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(args.torch_profiler)) as prof:
        hits, wall, steady = run(prof)
else:
    hits, wall, steady = run()
print("RESULT " + json.dumps({"program": "profiled_loop", "post": args.post, "batches": args.batches,
                              "wall_s": round(wall, 3), "steady_batches_per_s": steady, "hits": hits}))
