"""Batch similarity-search service: hash query text to feature vectors in
Python, score them against a large embedding corpus on the GPU, wait for the
result with a CUDA event, then build the Python response.

Profiled with the *legacy* autograd profiler:
    torch.autograd.profiler.profile(use_cuda=True)        (old torch)
    torch.autograd.profiler.profile(use_device="cuda")    (newer torch)
falling back to a CPU-only profile when there is no GPU. Writes
legacy_event_sync.json with export_chrome_trace().
"""
import argparse
import os
import random
import time
import zlib

import torch
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="./traces")
    p.add_argument("--small", action="store_true")
    return p.parse_args()


def make_profiler(device):
    from torch.autograd import profiler as autograd_profiler

    if device.type != "cuda":
        return autograd_profiler.profile()
    try:
        return autograd_profiler.profile(use_cuda=True)
    except TypeError:
        # use_cuda was removed; newer releases spell it use_device
        return autograd_profiler.profile(use_device="cuda")


def featurize(queries, dim):
    # hashing-trick bag of words, pure Python
    rows = []
    for q in queries:
        row = [0.0] * dim
        for w in q.split():
            h = zlib.crc32(w.encode())
            row[h % dim] += 1.0 if (h >> 16) & 1 else -1.0
        rows.append(row)
    return torch.tensor(rows)


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)

    if args.small:
        n_corpus, feat_dim, dim, n_query, k, steps = 4096, 32, 64, 32, 5, 5
    else:
        n_corpus, feat_dim, dim, n_query, k, steps = 524288, 256, 1024, 1024, 10, 40

    rng = random.Random(0)
    vocab = [f"tok{i}" for i in range(5000)]
    query_batches = [[" ".join(rng.choices(vocab, k=16)) for _ in range(n_query)] for _ in range(4)]

    corpus = F.normalize(torch.randn(n_corpus, dim, device=device), dim=1)
    proj = torch.randn(feat_dim, dim, device=device) / feat_dim ** 0.5

    results = []
    t0 = time.perf_counter()
    with make_profiler(device) as prof:
        for step in range(steps):
            feats = featurize(query_batches[step % 4], feat_dim).to(device)
            q = F.normalize(feats @ proj, dim=1)
            scores = q @ corpus.T                       # (n_query, n_corpus): the long kernel
            top_scores, top_idx = scores.topk(k, dim=1)
            if device.type == "cuda":
                done = torch.cuda.Event()
                done.record()
                done.synchronize()                      # wait for the GPU before touching results
            top_idx = top_idx.cpu().tolist()
            top_scores = top_scores.cpu().tolist()
            response = [
                {"query": qi, "hits": [{"doc": d, "score": round(s, 4)} for d, s in zip(idx, sc)]}
                for qi, (idx, sc) in enumerate(zip(top_idx, top_scores))
            ]
            results.append(len(response))
    elapsed = time.perf_counter() - t0
    print(f"{steps} batches of {n_query} queries in {elapsed:.2f}s -> {steps * n_query / elapsed:.0f} q/s")

    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    path = os.path.join(args.out, "legacy_event_sync.json")
    prof.export_chrome_trace(path)
    print("wrote", path)


if __name__ == "__main__":
    main()
