"""Transformer-encoder language-model training step, with per-phase timing.

The user wants forward/backward/optimizer times for every step, so each phase
is bracketed with torch.cuda.synchronize() + time.perf_counter().

Profiled with schedule(wait=1, warmup=1, active=3, repeat=1) and
tensorboard_trace_handler(DIR) (plain .json), with_stack=True, no
record_function ranges.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    return p.parse_args()


class TinyLM(nn.Module):
    def __init__(self, vocab, d_model, nhead, nlayers, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, 4 * d_model, dropout=0.1, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx):
        h = self.tok(idx) + self.pos[:, : idx.shape[1]]
        h = self.enc(h)
        return self.head(h)


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)

    if args.small:
        vocab, d, heads, layers, seq, batch, steps = 500, 64, 4, 2, 32, 4, 8
    else:
        vocab, d, heads, layers, seq, batch, steps = 8000, 512, 8, 4, 128, 16, 300

    model = TinyLM(vocab, d, heads, layers, seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, vocab, (8, batch, seq + 1), device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    fwd_t = bwd_t = opt_t = 0.0
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=tensorboard_trace_handler(args.out),
        with_stack=True,
    ) as prof:
        for step in range(steps):
            batch_tok = tokens[step % 8]
            inp, tgt = batch_tok[:, :-1], batch_tok[:, 1:]

            sync()
            t0 = time.perf_counter()
            logits = model(inp)
            loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1))
            sync()
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            sync()
            t2 = time.perf_counter()
            opt.step()
            sync()
            t3 = time.perf_counter()

            fwd_t += t1 - t0
            bwd_t += t2 - t1
            opt_t += t3 - t2
            if step % 50 == 0:
                print(f"step {step:4d} fwd {1e3 * (t1 - t0):6.2f} ms  bwd {1e3 * (t2 - t1):6.2f} ms  opt {1e3 * (t3 - t2):6.2f} ms")
            prof.step()

    n = steps
    print(f"avg fwd {1e3 * fwd_t / n:.2f} ms  bwd {1e3 * bwd_t / n:.2f} ms  opt {1e3 * opt_t / n:.2f} ms")


if __name__ == "__main__":
    main()
