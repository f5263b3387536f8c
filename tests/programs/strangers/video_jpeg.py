"""Action recognition over a "video" stored as JPEG frames in memory.

At start we render N frames (moving gradients + shapes) and keep them as JPEG bytes, like frames pulled
from an MJPEG stream. In the loop each clip's frames are decoded with PIL, resized, stacked and sent to
an R(2+1)D / R3D-18 network (random weights).
"""
import argparse
import io
import json
import time

import numpy as np
import torch
import torchvision
from PIL import Image, ImageDraw

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--batches", type=int, default=None)
parser.add_argument("--warmup", type=int, default=None)
parser.add_argument("--clips", type=int, default=4, help="clips per batch")
parser.add_argument("--frames", type=int, default=16)
parser.add_argument("--width", type=int, default=960)
parser.add_argument("--height", type=int, default=540)
parser.add_argument("--small", action="store_true")
args = parser.parse_args()
if args.batches is None:
    args.batches = 4 if args.small else 60
if args.warmup is None:
    args.warmup = 1 if args.small else 3
if args.small:
    args.clips, args.frames, args.width, args.height = 1, 4, 320, 180
RESIZE, CROP = ((86, 64), 56) if args.small else ((171, 128), 112)


def render_frames(n, w, h):
    """Fake footage: a gradient background with a few moving rectangles, JPEG encoded."""
    out = []
    yy, xx = np.mgrid[0:h, 0:w]
    for t in range(n):
        bg = np.stack([(xx + 3 * t) % 256, (yy + 2 * t) % 256, (xx + yy + t) % 256], -1).astype(np.uint8)
        img = Image.fromarray(bg)
        d = ImageDraw.Draw(img)
        for k in range(5):
            x0 = (37 * k + 11 * t) % (w - 60)
            y0 = (53 * k + 7 * t) % (h - 60)
            d.rectangle([x0, y0, x0 + 50, y0 + 40], fill=(255 - 40 * k, 30 * k, 128))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


jpegs = render_frames(96, args.width, args.height)
print(f"{len(jpegs)} frames, {sum(map(len, jpegs)) / 1e6:.1f} MB of JPEG")

device = torch.device(args.device)
model = torchvision.models.video.r3d_18(weights=None, num_classes=400).to(device).eval()
mean = torch.tensor([0.43216, 0.394666, 0.37645], device=device).view(1, 3, 1, 1, 1)
std = torch.tensor([0.22803, 0.22145, 0.216989], device=device).view(1, 3, 1, 1, 1)

top = []
t0 = time.perf_counter()
with torch.no_grad():
    for i in range(args.batches):
        if i == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter()
        clips = []
        for c in range(args.clips):
            frames = []
            start = (i * args.clips + c) * 4 % (len(jpegs) - args.frames)
            for f in range(args.frames):
                img = Image.open(io.BytesIO(jpegs[start + f])).convert("RGB")
                img = img.resize(RESIZE, Image.BILINEAR)
                top_, left = (RESIZE[1] - CROP) // 2, (RESIZE[0] - CROP) // 2
                arr = np.asarray(img)[top_:top_ + CROP, left:left + CROP]   # center crop
                frames.append(torch.from_numpy(arr.copy()))
            clips.append(torch.stack(frames))                 # T,H,W,C
        x = torch.stack(clips).permute(0, 4, 1, 2, 3).to(device).float() / 255.0   # B,C,T,H,W
        x = (x - mean) / std
        logits = model(x)
        top.extend(logits.argmax(1).tolist())
if device.type == "cuda":
    torch.cuda.synchronize()
t2 = time.perf_counter()

n = args.batches - args.warmup
print("RESULT " + json.dumps({"program": "video_jpeg", "batches": n, "wall_s": round(t2 - t0, 3),
                              "steady_batches_per_s": n / (t2 - t1), "clips": len(top)}))
