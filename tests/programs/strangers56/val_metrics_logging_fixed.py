"""Validation pass for an image classifier (ResNet-50, 1000 classes): loss,
top-1 and top-5 over the held-out set, with a per-step metrics log that the
dashboard picks up from metrics.json.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class HeldOutSet(Dataset):
    """Pre-decoded 8-bit crops held in memory (synthetic), normalised on access."""

    def __init__(self, n, size, n_unique=256, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.crops = torch.randint(0, 256, (n_unique, 3, size, size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 1000, (n,), generator=g)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.crops[i % len(self.crops)].float().div_(255.0)
        return (x - MEAN) / STD, self.labels[i]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny sizes for a quick CPU check")
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    args = p.parse_args()
    batches = args.batches or (6 if args.small else 60)
    warmup = args.warmup if args.warmup is not None else (2 if args.small else 5)
    bs, size, workers = (4, 64, 2) if args.small else (128, 224, 6)

    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = torchvision.models.resnet50(weights=None).to(dev).eval()
    loader = DataLoader(HeldOutSet(batches * bs, size), batch_size=bs, shuffle=False,
                        num_workers=workers, persistent_workers=False)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    history, step_stats, step_sizes = [], [], []
    loss_sum, top1, top5, seen = 0.0, 0, 0, 0
    t0 = time.perf_counter()
    for i, (images, labels) in enumerate(loader):
        if i == warmup:
            sync()
            t_steady = time.perf_counter()
        images, labels = images.to(dev), labels.to(dev)
        with torch.no_grad():
            logits = model(images)
            loss = F.cross_entropy(logits, labels, reduction="sum")
            hit5 = (logits.topk(5, dim=1).indices == labels[:, None])
        step_stats.append(torch.stack([loss, hit5[:, 0].sum().float(), hit5.any(dim=1).sum().float()]))
        step_sizes.append(labels.numel())
    for i, (l, h1, h5) in enumerate(torch.stack(step_stats).tolist()):  # one copy at the end
        loss_sum, top1, top5, seen = loss_sum + l, top1 + int(h1), top5 + int(h5), seen + step_sizes[i]
        history.append({"step": i, "loss": loss_sum / seen, "top1": top1 / seen, "top5": top5 / seen})
    sync()
    t_end = time.perf_counter()

    metrics = {"loss": loss_sum / seen, "top1": top1 / seen, "top5": top5 / seen, "steps": history}
    with open("/dev/null", "w") as fh:  # the dashboard drop-box in production
        json.dump(metrics, fh)
    n_meas = batches - warmup
    print("RESULT " + json.dumps({
        "program": "val_metrics_logging_fixed",
        "batches": n_meas,
        "wall_s": round(t_end - t0, 4),
        "steady_batches_per_s": round(n_meas / (t_end - t_steady), 4),
        "images": seen,
        "top1_hits": top1,
        "top5_hits": top5,
        "loss_sum": round(loss_sum, 2),
    }))


if __name__ == "__main__":
    main()
