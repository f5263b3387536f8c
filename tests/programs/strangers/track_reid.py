"""Multi-camera re-identification: detections' embeddings are matched against a growing gallery.

Per batch of frames a conv net produces, for a fixed grid of candidate boxes, an objectness score and an
embedding. Per frame we keep the confident candidates with boolean-mask indexing, match them against
the gallery by cosine similarity, and add the unmatched ones to the gallery with torch.cat.
All tensors stay on the GPU; the control flow reads them with Python `if`s.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class ReIDNet(nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        r = torchvision.models.resnet34(weights=None)
        self.body = nn.Sequential(*list(r.children())[:-2])  # stride 32, 512 channels
        self.obj = nn.Conv2d(512, 1, 1)
        self.emb = nn.Conv2d(512, dim, 1)

    def forward(self, x):
        f = self.body(x)
        o = self.obj(f).flatten(1)
        score = torch.sigmoid((o - o.mean(1, keepdim=True)) / (o.std(1, keepdim=True) + 1e-6))  # (B, H*W)
        emb = F.normalize(self.emb(f), dim=1).flatten(2).transpose(1, 2)  # (B, H*W, dim)
        return score, emb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32, help="frames per batch")
    ap.add_argument("--img", type=int, default=384)
    ap.add_argument("--thr", type=float, default=0.8)
    ap.add_argument("--match", type=float, default=0.6)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.batches is None:
        args.batches = 4 if args.small else 800
    if args.warmup is None:
        args.warmup = 1 if args.small else 5
    if args.small:
        args.batch, args.img = 2, 128
    dev = torch.device(args.device)

    torch.manual_seed(0)
    net = ReIDNet().to(dev).eval()
    frames = torch.rand(6, args.batch, 3, args.img, args.img, device=dev)
    gallery = torch.empty(0, 128, device=dev)
    gallery_hits = []
    matched = new_ids = 0

    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.batches):
            if i == args.warmup:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t1 = time.perf_counter()
            score, emb = net(frames[i % 6])
            for b in range(score.shape[0]):
                keep = score[b] > args.thr
                if keep.sum() == 0:
                    continue
                cand = emb[b][keep]
                if gallery.shape[0] > 0:
                    sim = cand @ gallery.T
                    best, idx = sim.max(dim=1)
                    hit = best > args.match
                    for k in idx[hit].tolist():
                        gallery_hits[k] += 1
                    matched += int(hit.sum())
                    cand = cand[~hit]
                if len(cand):
                    gallery = torch.cat([gallery, cand], 0)[-4096:]
                    gallery_hits = (gallery_hits + [1] * len(cand))[-4096:]
                    new_ids += len(cand)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()

    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "track_reid", "batches": n, "wall_s": round(t2 - t0, 3),
                                  "steady_batches_per_s": n / (t2 - t1), "matched": matched,
                                  "new_ids": new_ids, "gallery": int(gallery.shape[0])}))


if __name__ == "__main__":
    main()
