"""tokenize_embed.py with its tokenizing in DataLoader workers and the ids prefetched to the GPU.

The program is tokenize_embed.py's (its tokenizer, documents and BERT-base; no NVTX ranges).

Fixed with torch's DataLoader (--workers processes tokenize the batches ahead) and nsys_transfer.fixes.prefetch (the
ids pinned and copied on a side stream): the launching thread only launches (docs/fixes.md).

usage:  python3 tests/programs/tokenize_embed_fixed.py [--device cuda] [--batches 10] [--warmup 2] [--batch 64]
        [--words 1500] [--max-length 256] [--ceiling]
"""
import time

import torch
from tokenize_embed import arguments, ceiling, pooled, report, setup  # the same program's parts

from nsys_transfer.fixes import prefetch


def main():
    args = arguments()
    device, tokenizer, model, docs = setup(args)
    if args.ceiling:
        return ceiling(args, device, tokenizer, model, docs)
    embeddings = []

    def tokenize(batch):
        enc = tokenizer.encode_batch(batch)
        return torch.tensor([e.ids for e in enc]), torch.tensor([e.attention_mask for e in enc])
    loader = torch.utils.data.DataLoader(docs, batch_size=args.batch, collate_fn=tokenize, num_workers=args.workers)
    with torch.inference_mode():
        for i, (ids, mask) in enumerate(prefetch(loader, device)):
            if i == args.warmup:
                t0 = time.perf_counter()
            embeddings.append(pooled(model(input_ids=ids, attention_mask=mask).last_hidden_state, mask))
    report("tokenize_embed_fixed", args, embeddings, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
