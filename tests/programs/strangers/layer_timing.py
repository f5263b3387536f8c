"""Per-layer latency logging for a ViT-B/16 (random weights), written the "obvious" way.

The forward pass is unrolled by hand and every piece is wrapped with torch.cuda.synchronize() and
time.time() so we can print a per-layer breakdown every few batches.
"""
import argparse
import json
import time
from collections import defaultdict

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--batches", type=int, default=None)
p.add_argument("--warmup", type=int, default=None)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--log-every", type=int, default=250)
p.add_argument("--small", action="store_true")
args = p.parse_args()
if args.batches is None:
    args.batches = 5 if args.small else 1500
if args.warmup is None:
    args.warmup = 1 if args.small else 10

device = torch.device(args.device)
if args.small:
    args.batch, args.log_every = 2, 2
    model = torchvision.models.VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=2,
                                                 hidden_dim=64, mlp_dim=128)
    img = 64
else:
    model = torchvision.models.vit_b_16(weights=None)
    img = 224
model = model.to(device).eval()

timings = defaultdict(float)


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(name, fn, *a):
    sync()
    s = time.time()
    out = fn(*a)
    sync()
    timings[name] += time.time() - s
    return out


def forward(x):
    x = timed("patchify", model._process_input, x)
    cls = model.class_token.expand(x.shape[0], -1, -1)
    x = timed("cat_cls", torch.cat, [cls, x], 1)
    x = timed("pos_embed", lambda t: t + model.encoder.pos_embedding, x)
    for k, layer in enumerate(model.encoder.layers):
        x = timed(f"block{k:02d}", layer, x)
    x = timed("final_ln", model.encoder.ln, x)
    return timed("head", model.heads, x[:, 0])


x = torch.randn(args.batch, 3, img, img, device=device)
n_pred = 0
t0 = time.perf_counter()
with torch.no_grad():
    for i in range(args.batches):
        if i == args.warmup:
            sync()
            timings.clear()
            t1 = time.perf_counter()
        logits = forward(x)
        n_pred += logits.shape[0]
        if (i + 1) % args.log_every == 0 and i >= args.warmup:
            done = i + 1 - args.warmup
            top = sorted(timings.items(), key=lambda kv: -kv[1])[:3]
            print(f"batch {i + 1}: " + ", ".join(f"{k} {1000 * v / done:.2f} ms" for k, v in top))
sync()
t2 = time.perf_counter()

n = args.batches - args.warmup
print("RESULT " + json.dumps({"program": "layer_timing", "batches": n, "wall_s": round(t2 - t0, 3),
                              "steady_batches_per_s": n / (t2 - t1), "predictions": n_pred,
                              "per_layer_ms": {k: round(1000 * v / n, 3) for k, v in sorted(timings.items())}}))
