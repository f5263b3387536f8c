"""A toy text-classification "server": a thread pool handles requests one at a time each.

Every request thread tokenises its text with a simple hashing tokenizer, builds a tensor, moves it to the
device, runs the shared model under a lock (the model is not assumed thread safe) and reads the
probabilities back with .cpu().tolist(). A "batch" here is one wave of --requests concurrent requests.
"""
import argparse
import json
import random
import re
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

WORDS = ("the a an service model request latency cache token server queue batch user order payment "
         "refund delivery late broken great terrible okay fine slow fast support account login error").split()
LABELS = ["billing", "shipping", "tech", "account", "praise", "complaint"]


class Classifier(nn.Module):
    def __init__(self, vocab=30000, d=512, layers=4, heads=8, max_len=256):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(max_len, d))
        enc = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True)
        self.enc = nn.TransformerEncoder(enc, layers, enable_nested_tensor=False)
        self.cls = nn.Linear(d, len(LABELS))

    def forward(self, ids, mask):
        h = self.emb(ids) + self.pos[: ids.shape[1]]
        h = self.enc(h, src_key_padding_mask=~mask)
        h = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        return self.cls(h)


def tokenize(text, vocab=30000, max_len=128):
    toks = re.findall(r"\w+|[^\w\s]", text.lower())
    ids = [101] + [1000 + (zlib.crc32(t.encode()) % (vocab - 1000)) for t in toks][: max_len - 2] + [102]
    return ids


class Server:
    def __init__(self, model, device):
        self.model = model
        self.device = device
        self.lock = threading.Lock()

    def handle(self, text):
        ids = tokenize(text)
        x = torch.tensor([ids], dtype=torch.long).to(self.device)
        mask = torch.ones_like(x, dtype=torch.bool)
        with self.lock:
            with torch.no_grad():
                logits = self.model(x, mask)
        probs = logits.softmax(-1)[0].cpu().tolist()
        best = max(range(len(probs)), key=lambda k: probs[k])
        return {"label": LABELS[best], "score": probs[best]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.batches is None:
        args.batches = 4 if args.small else 200
    if args.warmup is None:
        args.warmup = 1 if args.small else 5
    if args.small:
        args.requests, args.threads = 4, 2

    device = torch.device(args.device)
    torch.manual_seed(0)
    d, layers = (64, 1) if args.small else (512, 4)
    model = Classifier(d=d, layers=layers, heads=4 if args.small else 8).to(device).eval()
    server = Server(model, device)
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 120))) + "." for _ in range(500)]

    labels_seen = {}
    pool = ThreadPoolExecutor(max_workers=args.threads)
    t0 = time.perf_counter()
    for i in range(args.batches):
        if i == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter()
        wave = [texts[(i * args.requests + k) % len(texts)] for k in range(args.requests)]
        futures = [pool.submit(server.handle, t) for t in wave]
        for f in futures:
            r = f.result()
            labels_seen[r["label"]] = labels_seen.get(r["label"], 0) + 1
    pool.shutdown()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()

    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "threaded_serving", "batches": n, "wall_s": round(t2 - t0, 3),
                                  "steady_batches_per_s": n / (t2 - t1), "requests": sum(labels_seen.values()),
                                  "labels": labels_seen}))


if __name__ == "__main__":
    main()
