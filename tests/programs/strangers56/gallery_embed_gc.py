"""Build the product-image gallery for visual search: embed catalogue images
with a ViT-B/16 trunk (CLS token, L2-normalised) and keep one metadata record
per image so hits can be mapped back to SKUs.
"""
import argparse
import gc
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny sizes for a quick CPU check")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    args = p.parse_args()
    batches = args.batches or (5 if args.small else 20)
    warmup = args.warmup if args.warmup is not None else (1 if args.small else 2)
    bs, size = (4, 64) if args.small else (256, 224)

    torch.manual_seed(0)
    dev = torch.device(args.device)
    if args.small:
        model = torchvision.models.VisionTransformer(size, 16, num_layers=2, num_heads=4,
                                                     hidden_dim=64, mlp_dim=256)
    else:
        model = torchvision.models.vit_b_16(weights=None)
    model.heads = nn.Identity()
    model = model.to(dev).eval()
    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1)
    g = torch.Generator(device=dev).manual_seed(1)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    gallery, records = [], []
    t0 = time.perf_counter()
    for i in range(batches):
        if i == warmup:
            sync()
            t_steady = time.perf_counter()
        # catalogue images arrive decoded on the device (synthetic here)
        images = torch.rand(bs, 3, size, size, device=dev, generator=g)
        with torch.no_grad():
            feats = model((images - mean) / std)
            gallery.append(F.normalize(feats, dim=1))
        for j in range(bs):
            sku = i * bs + j
            records.append({"row": sku, "sku": f"SKU-{sku:08d}", "shard": sku % 16,
                            "source": f"catalogue/{sku % 97:02d}/{sku}.jpg"})
        # keep the memory footprint flat over long runs
        del images, feats
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    sync()
    t_end = time.perf_counter()

    emb = torch.cat(gallery).double().cpu()
    n_meas = batches - warmup
    print("RESULT " + json.dumps({
        "program": "gallery_embed_gc",
        "batches": n_meas,
        "wall_s": round(t_end - t0, 4),
        "steady_batches_per_s": round(n_meas / (t_end - t_steady), 4),
        "images": len(records),
        "emb_checksum": round(float(emb.abs().sum()), 3),
        "first_col_sum": round(float(emb[:, 0].sum()), 5),
    }))


if __name__ == "__main__":
    main()
