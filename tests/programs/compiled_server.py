"""A small model served request by request through torch.compile's CUDA graphs, written the way its users write it.

A small MLP scorer (LayerNorm, 512 -> 2048 -> 2048 -> 512 with GELUs, a 16-way head) compiled with
`torch.compile(model, mode="reduce-overhead")` (Inductor's kernels replayed as CUDA graphs). Each of ~200 requests
is handled alone: a small pageable NumPy input (8 x 512 fp32) `.to("cuda")`, the compiled call, the scores `.cpu()`
for the reply. Where Inductor cannot compile on the machine (no Triton or C compiler), the program says so and
falls back to `torch.compile(model, backend="cudagraphs")`; the RESULT line names the backend that ran.

usage:  python3 tests/programs/compiled_server.py [--device cuda] [--requests 200] [--warmup 20] [--batch 8]
        [--backend inductor|cudagraphs]
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
from torch import nn


class Scorer(nn.Module):
    """LayerNorm, a three-layer GELU MLP and a small head."""

    def __init__(self, dim=512, hidden=2048, classes=16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        """Scores of each row: softmax over the head of the residual MLP."""
        h = x + self.mlp(self.norm(x))
        return self.head(h).softmax(-1)


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20, help="requests before the clock starts")
    p.add_argument("--batch", type=int, default=8, help="rows per request")
    p.add_argument("--backend", default="inductor", choices=["inductor", "cudagraphs"])
    return p.parse_args()


def compiled(model, backend, example):
    """The model compiled (the first call compiles); Inductor's failure falls back to the cudagraphs backend."""
    if backend == "inductor":
        fn = torch.compile(model, mode="reduce-overhead")
        try:
            fn(example)
            return fn, "inductor"
        except Exception as e:  # any compiler failure: say which, then the fallback
            print(f"compiled_server: inductor failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                  "using backend='cudagraphs'", file=sys.stderr)
            torch._dynamo.reset()
    fn = torch.compile(model, backend="cudagraphs")
    fn(example)
    return fn, "cudagraphs"


def main():
    args = arguments()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = Scorer().to(device).eval()
    rng = np.random.default_rng(0)
    requests = [rng.standard_normal((args.batch, 512), dtype=np.float32) for _ in range(args.requests)]
    with torch.inference_mode():
        fn, backend = compiled(model, args.backend, torch.from_numpy(requests[0]).to(device))
        replies = []
        for i, req in enumerate(requests):
            if i == args.warmup:
                t0 = time.perf_counter()
            x = torch.from_numpy(req).to(device)
            scores = fn(x)
            replies.append(scores.cpu().numpy().argmax(1))
    seconds = time.perf_counter() - t0
    measured = args.requests - args.warmup
    print("RESULT " + json.dumps({"program": "compiled_server", "backend": backend, "requests": measured,
                                  "answered": sum(len(r) for r in replies), "requests_per_s": measured / seconds}))


if __name__ == "__main__":
    main()
