"""Offline tracking-by-detection pass: run a CenterNet/FairMOT-style detector
(ResNet-18 trunk, deconv neck, heatmap / size / offset / re-ID heads) over a
clip and keep the top-100 detections per frame together with their re-ID
embeddings for the association step that runs later.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class CenterNet(nn.Module):
    def __init__(self, num_classes=80, emb_dim=64):
        super().__init__()
        trunk = torchvision.models.resnet18(weights=None)
        self.trunk = nn.Sequential(*list(trunk.children())[:-2])  # stride 32, 512 ch
        neck, in_ch = [], 512
        for out_ch in (256, 128, 64):
            neck += [nn.ConvTranspose2d(in_ch, out_ch, 4, stride=2, padding=1, bias=False),
                     nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True)]
            in_ch = out_ch
        self.neck = nn.Sequential(*neck)  # back to stride 4

        def head(c):
            return nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(inplace=True),
                                 nn.Conv2d(64, c, 1))
        self.hm, self.wh, self.reg, self.emb = head(num_classes), head(2), head(2), head(emb_dim)
        nn.init.constant_(self.hm[-1].bias, -2.19)

    def forward(self, x):
        f = self.neck(self.trunk(x))
        return {
            "hm": self.hm(f).sigmoid(),
            "wh": F.softplus(self.wh(f)) * 8.0,
            "reg": self.reg(f).sigmoid(),
            "emb": F.normalize(self.emb(f), dim=1),
        }


def decode(out, k=100, stride=4):
    """Peak picking on the heatmap -> (B, k, 6) [x1, y1, x2, y2, score, cls] and (B, k, E) embeddings."""
    hm = out["hm"]
    b, c, h, w = hm.shape
    peaks = F.max_pool2d(hm, 3, stride=1, padding=1)
    hm = hm * (peaks == hm)
    scores, idx = hm.reshape(b, -1).topk(k)
    cls = idx // (h * w)
    pix = idx % (h * w)
    ys = (pix // w).float()
    xs = (pix % w).float()
    wh = out["wh"].reshape(b, 2, -1).gather(2, pix.unsqueeze(1).expand(b, 2, k))
    reg = out["reg"].reshape(b, 2, -1).gather(2, pix.unsqueeze(1).expand(b, 2, k))
    e = out["emb"].shape[1]
    emb = out["emb"].reshape(b, e, -1).gather(2, pix.unsqueeze(1).expand(b, e, k))
    cx, cy = xs + reg[:, 0], ys + reg[:, 1]
    half_w, half_h = wh[:, 0] / 2, wh[:, 1] / 2
    boxes = torch.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], dim=2) * stride
    dets = torch.cat([boxes, scores.unsqueeze(2), cls.unsqueeze(2).float()], dim=2)
    return dets, emb.transpose(1, 2)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny sizes for a quick CPU check")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    args = p.parse_args()
    batches = args.batches or (6 if args.small else 50)
    warmup = args.warmup if args.warmup is not None else (2 if args.small else 5)
    bs, size = (2, 128) if args.small else (16, 512)

    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = CenterNet().to(dev).eval()

    # the clip, already decoded and resident on the device
    g = torch.Generator(device=dev).manual_seed(1)
    clip = [torch.rand(bs, 3, size, size, device=dev, generator=g) for _ in range(4)]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    tracks_in = []
    t0 = time.perf_counter()
    for i in range(batches):
        if i == warmup:
            sync()
            t_steady = time.perf_counter()
        frames = clip[i % len(clip)]
        with torch.no_grad():
            out = model(frames)
        out = {k: v.cpu() for k, v in out.items()}
        dets, embs = decode(out)
        tracks_in.append((dets, embs))
    sync()
    t_end = time.perf_counter()

    det_sum = sum(float(d.double().sum()) for d, _ in tracks_in)
    emb_sum = sum(float(e.double().abs().sum()) for _, e in tracks_in)
    n_meas = batches - warmup
    print("RESULT " + json.dumps({
        "program": "heatmap_detector",
        "batches": n_meas,
        "wall_s": round(t_end - t0, 4),
        "steady_batches_per_s": round(n_meas / (t_end - t_steady), 4),
        "frames": batches * bs,
        "det_checksum": round(det_sum, 2),
        "emb_checksum": round(emb_sum, 2),
    }))


if __name__ == "__main__":
    main()
