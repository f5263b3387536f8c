"""Embed a corpus of support tickets with a BERT-base sized text encoder
(mean-pooled, L2-normalised) for the nearest-neighbour index. Tokenisation is
our in-house WordPiece (BERT-style basic tokenizer + greedy longest match).
"""
import argparse
import functools
import json
import random
import time
import unicodedata

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

PAD, UNK, CLS, SEP = 0, 1, 2, 3


# ----------------------------------------------------------------- tokenizer
class WordPiece:
    def __init__(self, vocab):
        self.vocab = vocab

    @staticmethod
    def is_punct(ch):
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    def basic_tokenize(self, text):
        cleaned = []
        for ch in text:  # drop control chars, normalise whitespace
            if ord(ch) in (0, 0xFFFD) or (unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\t\n\r"):
                continue
            cleaned.append(" " if ch.isspace() else ch)
        words = []
        for token in "".join(cleaned).split():
            token = unicodedata.normalize("NFD", token.lower())
            token = "".join(ch for ch in token if unicodedata.category(ch) != "Mn")
            cur = []
            for ch in token:  # split off punctuation
                if self.is_punct(ch):
                    if cur:
                        words.append("".join(cur))
                        cur = []
                    words.append(ch)
                else:
                    cur.append(ch)
            if cur:
                words.append("".join(cur))
        return words

    def wordpiece(self, word):
        if len(word) > 100:
            return [UNK]
        pieces, start = [], 0
        while start < len(word):
            end, cur = len(word), None
            while start < end:
                sub = word[start:end]
                if start > 0:
                    sub = "##" + sub
                if sub in self.vocab:
                    cur = self.vocab[sub]
                    break
                end -= 1
            if cur is None:
                return [UNK]
            pieces.append(cur)
            start = end
        return pieces

    def encode(self, text, max_len):
        ids = [CLS]
        for w in self.basic_tokenize(text):
            ids.extend(self.wordpiece(w))
        return ids[:max_len - 1] + [SEP]


def encode_batch(docs, tok, max_len):
    rows = [tok.encode(d, max_len) for d in docs]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    for j, r in enumerate(rows):
        ids[j, :len(r)] = torch.tensor(r)
    return ids, ids != PAD


# ------------------------------------------------------- synthetic corpus
def make_corpus(n_docs, words_per_doc, seed=0):
    rng = random.Random(seed)
    cons, vows = "bcdfghjklmnprstvwz", "aeiou"
    sylls = sorted({c + v + rng.choice(["", "", "n", "r", "s"]) for c in cons for v in vows})
    vocab = {"[PAD]": PAD, "[UNK]": UNK, "[CLS]": CLS, "[SEP]": SEP}
    for s in sylls + ["##" + s for s in sylls] + list(".,;:!?'()-") + ["é", "##é"]:
        vocab.setdefault(s, len(vocab))
    types = ["".join(rng.choice(sylls) for _ in range(rng.randint(1, 4))) for _ in range(20000)]
    for w in types[:3000]:  # frequent words are whole pieces
        vocab.setdefault(w, len(vocab))
    weights = [1.0 / (r + 10) for r in range(len(types))]
    docs = []
    for _ in range(n_docs):
        words = rng.choices(types, weights, k=words_per_doc)
        out = []
        for k, w in enumerate(words):
            if k == 0 or rng.random() < 0.05:
                w = w.capitalize()
            if rng.random() < 0.02:
                w = w.replace("e", "é", 1)
            if rng.random() < 0.08:
                w += rng.choice(".,;!?")
            out.append(w)
        docs.append(" ".join(out))
    return docs, vocab


# ------------------------------------------------------------------ model
class TextEncoder(nn.Module):
    def __init__(self, vocab_size, d=768, layers=12, heads=12, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.norm(self.tok(ids) + self.pos(pos))
        h = self.enc(h, src_key_padding_mask=~mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny sizes for a quick CPU check")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    args = p.parse_args()
    batches = args.batches or (6 if args.small else 28)
    warmup = args.warmup if args.warmup is not None else (2 if args.small else 3)
    if args.small:
        bs, words, max_len, dims = 4, 60, 64, dict(d=64, layers=2, heads=4)
    else:
        bs, words, max_len, dims = 64, 400, 512, dict(d=768, layers=12, heads=12)

    torch.manual_seed(0)
    dev = torch.device(args.device)
    docs, vocab = make_corpus(batches * bs, words)
    tok = WordPiece(vocab)
    model = TextEncoder(len(vocab), **dims).to(dev).eval()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    embeddings, n_tokens = [], 0
    t0 = time.perf_counter()
    loader = DataLoader(docs[:batches * bs], batch_size=bs, num_workers=2,
                        collate_fn=functools.partial(encode_batch, tok=tok, max_len=max_len))
    for i, (ids, mask) in enumerate(loader):
        if i == warmup:
            sync()
            t_steady = time.perf_counter()
        n_tokens += int(mask.sum())
        ids, mask = ids.to(dev), mask.to(dev)
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            emb = model(ids, mask)
        embeddings.append(emb.float().cpu())
    sync()
    t_end = time.perf_counter()

    allemb = torch.cat(embeddings).double()
    n_meas = batches - warmup
    print("RESULT " + json.dumps({
        "program": "text_encoder_embed_fixed",
        "batches": n_meas,
        "wall_s": round(t_end - t0, 4),
        "steady_batches_per_s": round(n_meas / (t_end - t_steady), 4),
        "docs": allemb.shape[0],
        "tokens": n_tokens,
        "emb_checksum": round(float(allemb.abs().sum()), 3),
    }))


if __name__ == "__main__":
    main()
