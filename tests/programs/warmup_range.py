"""A training benchmark that marks its own warm-up, the way benchmark scripts do: one `torch.profiler.profile` around
everything (no schedule, no prof.step()), the first steps inside `record_function("warmup")` (the CUDA context, cuDNN
and cuBLAS handles, the caching allocator growing, module loading on the first launches), then the timed steps each
inside `record_function("train_step")`. For issue 58, item 2: the set-up inside the `warmup` range must read as set-up,
never as the loop's CPU work.

usage: python tests/programs/warmup_range.py OUT.json [--device cuda] [--warmup 3] [--steps 20] [--batch 64]
"""
import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        with record_function("warmup"):  # everything the first steps set up lives here
            model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
                                        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
                                        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                        torch.nn.Linear(64, 10)).to(args.device)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            x = torch.randn(args.batch, 3, 128, 128, device=args.device)
            y = torch.randint(0, 10, (args.batch,), device=args.device)
            for _ in range(args.warmup):
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            with record_function("train_step"):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    prof.export_chrome_trace(args.out)
    print(f"RESULT steps={args.steps} steps_per_s={args.steps / dt:.1f} loss={loss.item():.3f}")


if __name__ == "__main__":
    main()
