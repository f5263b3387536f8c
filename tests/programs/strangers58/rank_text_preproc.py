"""Per-rank text-classification trainer (the "launch one process per rank"
layout, without DistributedDataParallel: each rank trains on its own shard).

Each step tokenizes a batch of raw text in pure Python (lower-casing,
punctuation stripping, vocabulary lookup, padding) and then runs a small
transformer classifier training step.

Profiled with schedule(wait=2, warmup=1, active=4) and an on_trace_ready
callback that writes <out>/rank<R>_trace.json, with record_function ranges
"tokenize" and "train_step".

    python rank_text_preproc.py --rank 0 &
    python rank_text_preproc.py --rank 1
"""
import argparse
import os
import random
import string
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=2)
    return p.parse_args()


WORDS = ["the", "a", "model", "Profiler", "GPU", "kernel", "launch", "tensor", "data", "loader",
         "batch", "step", "loss", "gradient", "memory", "copy", "host", "device", "stream", "sync"]
PUNCT = set(string.punctuation)


def make_shard(rank, n_docs, mean_len, seed=1234):
    # each rank reads a different shard; shard 1 happens to hold longer documents
    rng = random.Random(seed + rank)
    docs = []
    for _ in range(n_docs):
        n = max(8, int(rng.gauss(mean_len * (1.0 + 0.5 * rank), mean_len * 0.2)))
        words = [rng.choice(WORDS) + rng.choice(["", "", ",", ".", "!"]) for _ in range(n)]
        docs.append((" ".join(words), rng.randrange(4)))
    return docs


class Tokenizer:
    def __init__(self):
        self.vocab = {"<pad>": 0, "<unk>": 1}
        for w in WORDS:
            self.vocab.setdefault(w.lower(), len(self.vocab))

    def encode(self, text, max_len):
        ids = []
        for tok in text.split():
            tok = "".join(ch for ch in tok.lower() if ch not in PUNCT)
            ids.append(self.vocab.get(tok, 1))
        ids = ids[:max_len]
        return ids + [0] * (max_len - len(ids))

    def batch(self, docs, max_len):
        ids = [self.encode(text, max_len) for text, _ in docs]
        labels = [lab for _, lab in docs]
        return torch.tensor(ids, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


class Classifier(nn.Module):
    def __init__(self, vocab, d, layers, max_len, n_cls=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, max_len, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.cls = nn.Linear(d, n_cls)

    def forward(self, ids):
        h = self.enc(self.emb(ids) + self.pos)
        return self.cls(h.mean(dim=1))


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.rank)

    if args.small:
        batch, max_len, mean_len, d, layers, steps = 4, 32, 24, 32, 1, 8
    else:
        batch, max_len, mean_len, d, layers, steps = 128, 256, 200, 256, 2, 30

    docs = make_shard(args.rank, batch * steps, mean_len)
    tok = Tokenizer()
    model = Classifier(len(tok.vocab), d, layers, max_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    def write_trace(p):
        path = os.path.join(args.out, f"rank{args.rank}_trace.json")
        p.export_chrome_trace(path)
        print(f"[rank {args.rank}] wrote {path}")

    t0 = time.perf_counter()
    with profile(
        activities=activities,
        schedule=schedule(wait=2, warmup=1, active=4),
        on_trace_ready=write_trace,
    ) as prof:
        for step in range(steps):
            with record_function("tokenize"):
                ids, labels = tok.batch(docs[step * batch:(step + 1) * batch], max_len)
                ids, labels = ids.to(device), labels.to(device)
            with record_function("train_step"):
                loss = F.cross_entropy(model(ids), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            prof.step()
    elapsed = time.perf_counter() - t0
    print(f"[rank {args.rank}] {steps} steps in {elapsed:.2f}s")


if __name__ == "__main__":
    main()
