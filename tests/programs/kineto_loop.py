"""A small segmentation-like inference loop profiled with torch.profiler the way its users do it (schedule,
with_stack=True, record_function ranges, ProfilerStep#N from prof.step()), its feature map read back into pageable
memory (.cpu()) and labelled on the CPU (.numpy().argmax) each step.
For the tests of the Kineto reader on real traces: recorded on the CPU by the tests, on a GPU by hand (--device
cuda), and the same program traced under nsys (--no-profiler) for the two-profilers agreement test.

usage: python tests/programs/kineto_loop.py OUT.json[.gz] [--device cpu|cuda] [--steps 8] [--batch 16] [--size 64]
                                          [--no-profiler] [--tensorboard [--cycles N]]
the two-profilers pair for tests/test_kineto.py (on a GPU machine with nsys, from the checkout, same arguments):
    python tests/programs/kineto_loop.py tests/data/kineto/kineto_loop_gpu.pt.trace.json.gz --device cuda --steps 12 \
        --batch 64 --size 128
    nsys-transfer run -o /tmp/kineto_loop_gpu -- python tests/programs/kineto_loop.py - --device cuda --steps 12 \
        --batch 64 --size 128 --no-profiler
    scrub-trace /tmp/kineto_loop_gpu.sqlite tests/data/kineto/kineto_loop_gpu.sqlite.xz
"""
import argparse
import contextlib
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler


def model_of(device):
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU())
    return backbone.to(device).eval()


def postprocess(features):
    labels = features.numpy().argmax(axis=1)  # the per-pixel labels, computed on the CPU, in the loop
    return float(np.bincount(labels.ravel(), minlength=32)[:3].sum())


RANGE = record_function  # --no-profiler on a GPU: NVTX ranges of the same names, which nsys records


def nvtx_range(name):
    return torch.cuda.nvtx.range(name) if torch.cuda.is_available() else contextlib.nullcontext()


def one_step(model, device, batch, size):
    with RANGE("get batch"):
        x = torch.rand(batch, 3, size, size).to(device)
    with RANGE("compute"), torch.no_grad():
        y = model(x)
    with RANGE("process output"):
        return postprocess(y.cpu())  # the whole feature map back into pageable memory, then labelled on the CPU


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--no-profiler", action="store_true", help="run the same loop unprofiled (for nsys)")
    p.add_argument("--cycles", type=int, default=1, help="the schedule's repeat: a trace per cycle (--tensorboard)")
    p.add_argument("--tensorboard", action="store_true",
                   help="OUT is a folder: write it with tensorboard_trace_handler (gzip) instead of export_chrome_trace")
    args = p.parse_args()
    torch.set_num_threads(1)
    model, total = model_of(args.device), 0.0
    t0 = time.perf_counter()
    if args.no_profiler:
        global RANGE
        RANGE = nvtx_range
        for i in range(args.steps):
            with nvtx_range(f"ProfilerStep#{i}"):  # the steps as torch.profiler names them
                total += one_step(model, args.device, args.batch, args.size)
    else:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
        # the five lines of the README's "torch.profiler traces"
        ready = (tensorboard_trace_handler(args.out, worker_name="loop", use_gzip=True) if args.tensorboard else
                 lambda prof: prof.export_chrome_trace(args.out))
        with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=args.steps - 2,
                                                              repeat=args.cycles),
                     with_stack=True, on_trace_ready=ready) as prof:
            for _ in range(args.steps * args.cycles):
                total += one_step(model, args.device, args.batch, args.size)
                prof.step()
    print(f"RESULT steps={args.steps} total={total:.3f} wall_s={time.perf_counter() - t0:.2f}")


if __name__ == "__main__":
    main()
