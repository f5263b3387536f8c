"""Hand-written greedy decoding with a small GPT-2 (random weights, built from GPT2Config).

Each "batch" is a batch of prompts that gets --new-tokens tokens appended, one step at a time, with the
KV cache. The next token of every row is picked with .argmax().item() and appended to a Python list.
Falls back to a tiny causal nn.TransformerEncoder LM (no cache) when transformers is not installed.
"""
import argparse
import json
import time

import torch
import torch.nn as nn

try:
    from transformers import GPT2Config, GPT2LMHeadModel
    HAVE_HF = True
except ImportError:
    HAVE_HF = False


class TinyLM(nn.Module):
    """Stand-in for GPT-2 when transformers is missing."""

    def __init__(self, vocab, d, layers, heads, ctx):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
        h = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        return self.lm_head(self.blocks(h, mask=mask, is_causal=True))


parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--batches", type=int, default=None)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--prompt-len", type=int, default=32)
parser.add_argument("--new-tokens", type=int, default=64)
parser.add_argument("--small", action="store_true")
args = parser.parse_args()

if args.small:
    n_layer, n_embd, n_head, vocab = 2, 64, 2, 1000
    args.batch, args.new_tokens, args.prompt_len = 2, 8, 8
    if args.batches is None:
        args.batches, args.warmup = 4, 1
else:
    n_layer, n_embd, n_head, vocab = 6, 512, 8, 50257
    args.batches = args.batches or 40

device = torch.device(args.device)
torch.manual_seed(0)
ctx = args.prompt_len + args.new_tokens + 8
if HAVE_HF:
    config = GPT2Config(vocab_size=vocab, n_positions=ctx, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
else:
    model = TinyLM(vocab, n_embd, n_layer, n_head, ctx)
model = model.to(device).eval()


def generate(prompts):
    seqs = [list(p) for p in prompts]
    ids = torch.tensor(seqs, device=device)
    past = None
    for step in range(args.new_tokens):
        if HAVE_HF:
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            logits, past = out.logits, out.past_key_values
        else:
            logits = model(torch.tensor(seqs, device=device))
        next_ids = []
        for b in range(len(seqs)):
            tok = logits[b, -1, :].argmax().item()
            seqs[b].append(tok)
            next_ids.append([tok])
        ids = torch.tensor(next_ids, device=device)
    return seqs


g = torch.Generator().manual_seed(1)
total_tokens = 0
t0 = time.perf_counter()
with torch.no_grad():
    for i in range(args.batches):
        if i == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t_steady = time.perf_counter()
        prompts = torch.randint(0, vocab, (args.batch, args.prompt_len), generator=g).tolist()
        outs = generate(prompts)
        total_tokens += sum(len(s) - args.prompt_len for s in outs)
        if i == 0:
            print("first continuation:", outs[0][args.prompt_len:args.prompt_len + 10])
if device.type == "cuda":
    torch.cuda.synchronize()
t1 = time.perf_counter()

measured = args.batches - args.warmup
print("RESULT " + json.dumps({"program": "greedy_gen", "batches": measured, "wall_s": round(t1 - t0, 3),
                              "steady_batches_per_s": measured / (t1 - t_steady), "tokens": total_tokens,
                              "backend": "transformers" if HAVE_HF else "nn.TransformerEncoder"}))
