"""Sentence embeddings for a corpus, sentence-transformers style, with a MiniLM-sized BERT (random weights).

encode() walks the corpus in batches (pre-tokenised ids of varying length, padded per batch), mean-pools
the last hidden state, L2-normalises, and appends each batch's embeddings to the result with
np.concatenate. Falls back to an nn.TransformerEncoder if transformers is missing.
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from transformers import BertConfig, BertModel
except ImportError:
    BertModel = None


class FallbackEncoder(nn.Module):
    def __init__(self, vocab, d, layers, heads):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(512, d)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True), layers,
                                         enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask):
        h = self.emb(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        return (self.enc(h, src_key_padding_mask=attention_mask == 0),)


class Embedder:
    def __init__(self, device, small=False):
        d, layers, heads = (64, 2, 2) if small else (384, 6, 12)
        if BertModel is not None:
            cfg = BertConfig(vocab_size=30522, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                             intermediate_size=4 * d, max_position_embeddings=512)
            self.model = BertModel(cfg, add_pooling_layer=False)
        else:
            self.model = FallbackEncoder(30522, d, layers, heads)
        self.model.to(device).eval()
        self.device = device
        self.dim = d

    def pad(self, seqs):
        n = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), n, dtype=torch.long)
        mask = torch.zeros(len(seqs), n, dtype=torch.long)
        for k, s in enumerate(seqs):
            ids[k, : len(s)] = torch.tensor(s)
            mask[k, : len(s)] = 1
        return ids, mask

    @torch.no_grad()
    def embed_batch(self, seqs):
        ids, mask = self.pad(seqs)
        ids, mask = ids.to(self.device), mask.to(self.device)
        out = self.model(input_ids=ids, attention_mask=mask)[0]
        m = mask.unsqueeze(-1).to(out.dtype)
        pooled = (out * m).sum(1) / m.sum(1).clamp(min=1)
        return F.normalize(pooled, dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.batches is None:
        args.batches = 6 if args.small else 600
    if args.warmup is None:
        args.warmup = 1 if args.small else 5
    if args.small:
        args.batch = 8

    device = torch.device(args.device)
    torch.manual_seed(0)
    enc = Embedder(device, small=args.small)
    rng = np.random.default_rng(0)
    corpus = [rng.integers(1000, 30000, size=rng.integers(16, 128)).tolist() for _ in range(2000)]

    all_emb = np.zeros((0, enc.dim), dtype=np.float32)
    t0 = time.perf_counter()
    for i in range(args.batches):
        if i == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter()
        seqs = [corpus[(i * args.batch + k) % len(corpus)] for k in range(args.batch)]
        emb = enc.embed_batch(seqs).cpu().numpy()
        all_emb = np.concatenate([all_emb, emb], axis=0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()

    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "bert_embed_concat", "batches": n, "wall_s": round(t2 - t0, 3),
                                  "steady_batches_per_s": n / (t2 - t1), "embeddings": list(all_emb.shape),
                                  "mean_norm": float(np.linalg.norm(all_emb, axis=1).mean())}))


if __name__ == "__main__":
    main()
