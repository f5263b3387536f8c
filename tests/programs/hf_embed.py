"""A Hugging Face encoder exporting per-token embeddings, written the way its users write it.

BERT-base from its config (random weights, no download) on batches of random token ids (64 x 512); per batch
`model(**batch).last_hidden_state.cpu().numpy()` (64 x 512 x 768 fp32: 101 MB), which the CPU stores as float16
(.npy per batch with --out, else serialised to /dev/null). The fixed program is hf_embed_fixed.py (docs/fixes.md);
--ceiling runs the model alone (no copy, no CPU work).

usage:  python3 tests/programs/hf_embed.py [--device cuda] [--batches 12] [--batch 64] [--tokens 512] [--out DIR]
"""
import argparse
import json
import os
import time

import numpy as np
import torch
from transformers import BertConfig, BertModel


def store(i, hidden, out_dir, part=""):
    """The CPU side: per-token embeddings as float16, saved (part: a slice of the batch's rows, its own file)."""
    emb = hidden.astype(np.float16)
    if out_dir:
        np.save(os.path.join(out_dir, f"emb_{i:05d}{part}.npy"), emb)
    else:
        with open(os.devnull, "wb") as f:
            f.write(emb.tobytes())


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--workers", type=int, default=8, help="output workers (the fixed program)")
    p.add_argument("--split", type=int, default=1, help="the fixed program: each batch's rows across this many workers")
    p.add_argument("--out", help="save each batch's embeddings here (.npy)")
    p.add_argument("--ceiling", action="store_true", help="the model alone: no copy, no post-processing")
    return p.parse_args()


def setup(args):
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=args.layers), add_pooling_layer=False).to(device).eval()
    batches = [{"input_ids": torch.randint(0, 30522, (args.batch, args.tokens)),
                "attention_mask": torch.ones(args.batch, args.tokens, dtype=torch.int64)} for _ in range(2)]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    return device, model, batches


def start_clock(device):
    """After the warm-up: the GPU's queue drained, then the clock."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def report(args, device, t0, name):
    measured = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": name, "ceiling": args.ceiling, "batches": measured,
                                  "batches_per_s": measured / (start_clock(device) - t0)}))


def ceiling(args, device, model, batches):
    """The model alone, no copy and no CPU work: what the GPU alone allows."""
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                t0 = start_clock(device)
            model(**{k: v.to(device) for k, v in batches[i % 2].items()})
    report(args, device, t0, "hf_embed")


def main():
    args = arguments()
    device, model, batches = setup(args)
    if args.ceiling:
        return ceiling(args, device, model, batches)
    t0 = start_clock(device)  # without warm-up, the clock counts the loop's `with` and its set-up too
    with torch.inference_mode():
        for i in range(args.batches):
            if 0 < i == args.warmup:
                t0 = start_clock(device)
            batch = {k: v.to(device) for k, v in batches[i % 2].items()}
            hidden = model(**batch).last_hidden_state
            store(i, hidden.cpu().numpy(), args.out)
    report(args, device, t0, "hf_embed")


if __name__ == "__main__":
    main()
