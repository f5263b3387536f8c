"""Dump dense ResNet-50 features (last stage, 2048x7x7, fp16) for a set of
object crops so the linear-probe experiments can train without touching the
backbone again. One shard file per batch: {"feats", "crop_ids"}.
"""
import argparse
import glob
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn
import torchvision


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny sizes for a quick CPU check")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--out", default=None, help="output directory (default: a temp dir, removed at exit)")
    args = p.parse_args()
    batches = args.batches or (6 if args.small else 40)
    warmup = args.warmup if args.warmup is not None else (2 if args.small else 4)
    bs, size = (2, 32) if args.small else (128, 224)

    torch.manual_seed(0)
    dev = torch.device(args.device)
    resnet = torchvision.models.resnet50(weights=None)
    trunk = nn.Sequential(*list(resnet.children())[:-2]).to(dev).eval()
    out_dir = args.out or tempfile.mkdtemp(prefix="crop_feats_")
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator(device=dev).manual_seed(1)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def write_shard(copied, shard, path):  # runs on the writer threads
        if copied is not None:
            copied.synchronize()
        torch.save(shard, path)

    writer, pending = ThreadPoolExecutor(max_workers=2), []
    t0 = time.perf_counter()
    for i in range(batches):
        if i == warmup:
            sync()
            t_steady = time.perf_counter()
        # crops arrive already resized and normalised on the device (synthetic here)
        crops = torch.randn(bs, 3, size, size, device=dev, generator=g)
        crop_ids = torch.arange(i * bs, (i + 1) * bs, device=dev)
        with torch.no_grad():
            feats = trunk(crops).half()
        shard = {"feats": feats.to("cpu", non_blocking=True), "crop_ids": crop_ids.to("cpu", non_blocking=True)}
        copied = torch.cuda.current_stream().record_event() if dev.type == "cuda" else None
        pending.append(writer.submit(write_shard, copied, shard, os.path.join(out_dir, f"shard_{i:05d}.pt")))
    writer.shutdown(wait=True)
    for f in pending:
        f.result()  # re-raise any write error
    sync()
    t_end = time.perf_counter()

    # read the shards back to check what landed on disk
    total, n_ids, id_sum = 0.0, 0, 0
    for path in sorted(glob.glob(os.path.join(out_dir, "shard_*.pt"))):
        shard = torch.load(path, map_location="cpu")
        total += float(shard["feats"].double().sum())
        n_ids += shard["crop_ids"].numel()
        id_sum += int(shard["crop_ids"].sum())
    if args.out is None:
        shutil.rmtree(out_dir)

    n_meas = batches - warmup
    print("RESULT " + json.dumps({
        "program": "crop_feature_dump_fixed",
        "batches": n_meas,
        "wall_s": round(t_end - t0, 4),
        "steady_batches_per_s": round(n_meas / (t_end - t_steady), 4),
        "crops": n_ids,
        "id_sum": id_sum,
        "feat_checksum": round(total, 2),
    }))


if __name__ == "__main__":
    main()
