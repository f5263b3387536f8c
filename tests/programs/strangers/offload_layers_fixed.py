"""'Big model on a small GPU' inference: blocks live on the CPU and are moved to the GPU only while used.

A stack of residual MLP blocks (about 1 GB of bf16 weights on the GPU run) is kept in host memory; every step
each block is moved .to("cuda"), applied, and moved back .to("cpu") to free GPU memory for the next.
"""
import argparse
import json
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class OffloadedModel(nn.Module):
    def __init__(self, n_blocks, d, hidden, dtype):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d, hidden) for _ in range(n_blocks)]).to(dtype)
        self.head = nn.Linear(d, 1000).to(dtype)

    def forward(self, x, device):
        for blk in self.blocks:   # weights already resident on the device
            x = blk(x)
        return self.head(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.batches is None:
        args.batches = 4 if args.small else 40
    if args.warmup is None:
        args.warmup = 1 if args.small else 2
    if args.small:
        args.batch = 4
    device = torch.device(args.device)
    n_blocks, d, hidden = (4, 128, 512) if args.small else (16, 2048, 8192)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    torch.manual_seed(0)
    model = OffloadedModel(n_blocks, d, hidden, dtype).to(device).eval()   # it fits: keep it there
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params / 1e6:.0f}M parameters, {n_params * (2 if dtype == torch.bfloat16 else 4) / 1e9:.2f} GB")

    checksum = 0.0
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.batches):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t1 = time.perf_counter()
            x = torch.randn(args.batch, 128, d, device=device, dtype=dtype)
            y = model(x, device)
            checksum += y.float().mean().item()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()

    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "offload_layers_fixed", "batches": n, "wall_s": round(t2 - t0, 3),
                                  "steady_batches_per_s": n / (t2 - t1), "checksum": round(checksum, 4)}))


if __name__ == "__main__":
    main()
