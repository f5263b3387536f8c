"""A document-embedding job in the style of sentence-transformers' encode(), written the way its users write it.

A BERT WordPiece tokenizer built locally with the `tokenizers` package (a synthetic 30,522-entry vocabulary,
BertNormalizer, BertPreTokenizer, [CLS]/[SEP], truncation and padding: no downloads), long synthetic documents
(~1,500 words, accents and punctuation included), and BERT-base from `transformers.BertConfig()` with random
weights on the GPU. Per batch, on the main thread: tokenize the batch, move the ids to the GPU, the forward, mean
pooling over the attention mask, L2 normalisation, the embeddings `.cpu()`. No NVTX ranges. Run with
TOKENIZERS_PARALLELISM=false (benchmarks/gpu.sh sets it) the tokenizer works on the launching thread alone.

The fixed program is tokenize_embed_fixed.py (tokenizing in DataLoader workers, the ids prefetched to the GPU);
--ceiling runs the model on ids tokenized before the clock.

usage:  python3 tests/programs/tokenize_embed.py [--device cuda] [--batches 10] [--warmup 2] [--batch 64]
        [--words 1500] [--max-length 256] [--ceiling]
"""
import argparse
import json
import random
import time

import numpy as np
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertModel

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONSONANTS = "bcdfghjklmnprstvwz"
VOWELS = "aeiou"


def syllables():
    return [c + v + t for c in CONSONANTS for v in VOWELS for t in ("", "n", "r", "s")]


def build_tokenizer(vocab_size=30522, max_length=256):
    """A BERT-style WordPiece tokenizer over a synthetic vocabulary: whole two-syllable words, `##` syllables and
    characters, so that longer words split into pieces as real ones do."""
    sy = syllables()
    rng = random.Random(0)
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,;:!?'\"()-")
    vocab = SPECIALS + chars + ["##" + c for c in chars] + sy + ["##" + s for s in sy]
    seen = set(vocab)
    while len(vocab) < vocab_size:
        w = rng.choice(sy) + rng.choice(sy)
        if w not in seen:
            seen.add(w)
            vocab.append(w)
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def documents(n, words, seed):
    """n synthetic documents of about `words` words: capitals, accents, numbers and punctuation."""
    rng = random.Random(seed)
    sy = syllables()
    accents = str.maketrans("aeiou", "áéíóú")
    docs = []
    for _ in range(n):
        out = []
        for j in range(words):
            w = "".join(rng.choice(sy) for _ in range(rng.choice((1, 2, 2, 3, 4))))
            if rng.random() < 0.05:
                w = w.translate(accents)
            if j % 12 == 0:
                w = w.capitalize()
            if rng.random() < 0.03:
                w = str(rng.randint(0, 9999))
            out.append(w + (rng.choice((".", ",", ";", "!", "?")) if rng.random() < 0.08 else ""))
        docs.append(" ".join(out))
    return docs


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="batches before the clock starts")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--words", type=int, default=1500, help="words per document")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--layers", type=int, default=12, help="BERT layers (BertConfig's default: 12)")
    p.add_argument("--workers", type=int, default=6, help="tokenizing DataLoader workers (the fixed program)")
    p.add_argument("--ceiling", action="store_true", help="the model alone on ids tokenized before the clock")
    return p.parse_args()


def ceiling(args, device, tokenizer, model, docs):
    """The forward, pooling and the small .cpu() on batches tokenized beforehand: what the GPU allows."""
    encoded = [tokenizer.encode_batch(docs[i * args.batch:(i + 1) * args.batch]) for i in range(2)]
    ids = [torch.tensor([e.ids for e in enc], device=device) for enc in encoded]
    masks = [torch.tensor([e.attention_mask for e in enc], device=device) for enc in encoded]
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                t0 = time.perf_counter()
            hidden = model(input_ids=ids[i % 2], attention_mask=masks[i % 2]).last_hidden_state
            hidden.mean(1).cpu()
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "tokenize_embed", "ceiling": True, "batches": measured,
                                  "batches_per_s": measured / (time.perf_counter() - t0)}))


def setup(args):
    """The device, the tokenizer, BERT-base on the device and the documents."""
    device = torch.device(args.device)
    tokenizer = build_tokenizer(max_length=args.max_length)
    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=args.layers), add_pooling_layer=False).to(device).eval()
    return device, tokenizer, model, documents(args.batch * args.batches, args.words, seed=1)


def pooled(hidden, mask):
    """Mean pooling over the attention mask, L2-normalised, on the CPU as numpy."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    out = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(out, p=2, dim=1).cpu().numpy()


def report(name, args, embeddings, seconds):
    measured = args.batches - args.warmup
    emb = np.concatenate(embeddings)
    print("RESULT " + json.dumps({"program": name, "batches": measured, "documents": len(emb),
                                  "dim": int(emb.shape[1]), "batches_per_s": measured / seconds,
                                  "docs_per_s": measured * args.batch / seconds}))


def main():
    args = arguments()
    device, tokenizer, model, docs = setup(args)
    if args.ceiling:
        return ceiling(args, device, tokenizer, model, docs)
    embeddings = []
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                t0 = time.perf_counter()
            batch = docs[i * args.batch:(i + 1) * args.batch]
            enc = tokenizer.encode_batch(batch)
            ids = torch.tensor([e.ids for e in enc], device=device)
            mask = torch.tensor([e.attention_mask for e in enc], device=device)
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
            embeddings.append(pooled(hidden, mask))
    report("tokenize_embed", args, embeddings, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
