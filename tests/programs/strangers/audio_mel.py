"""Keyword-spotting style audio inference: numpy log-mel per clip, small CNN on the GPU.

Synthetic 16 kHz clips (chirps + noise) are made once; each batch picks clips, computes an STFT and a
mel spectrogram per clip with numpy, stacks them and runs a small conv classifier.
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn

SR = 16000
N_FFT = 1024
HOP = 256
N_MELS = 80


def mel_filterbank(sr=SR, n_fft=N_FFT, n_mels=N_MELS):
    def hz2mel(f):
        return 2595 * np.log10(1 + f / 700.0)

    def mel2hz(m):
        return 700 * (10 ** (m / 2595.0) - 1)
    mels = np.linspace(hz2mel(0), hz2mel(sr / 2), n_mels + 2)
    bins = np.floor((n_fft + 1) * mel2hz(mels) / sr).astype(int)
    fb = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for m in range(1, n_mels + 1):
        l, c, r = bins[m - 1], bins[m], bins[m + 1]
        for k in range(l, c):
            fb[m - 1, k] = (k - l) / max(c - l, 1)
        for k in range(c, r):
            fb[m - 1, k] = (r - k) / max(r - c, 1)
    return fb


FB = mel_filterbank()
WINDOW = np.hanning(N_FFT).astype(np.float32)


def log_mel(clip):
    n_frames = 1 + (len(clip) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(clip, shape=(n_frames, N_FFT),
                                             strides=(clip.strides[0] * HOP, clip.strides[0]))
    spec = np.abs(np.fft.rfft(frames * WINDOW, axis=1)) ** 2   # (frames, 513)
    mel = FB @ spec.T                                            # (80, frames)
    return np.log(mel + 1e-6).astype(np.float32)


def make_clips(n, seconds, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(SR * seconds)) / SR
    clips = []
    for _ in range(n):
        f0, f1 = rng.uniform(100, 3000, size=2)
        chirp = np.sin(2 * np.pi * (f0 + (f1 - f0) * t / seconds / 2) * t)
        clips.append((0.5 * chirp + 0.1 * rng.standard_normal(len(t))).astype(np.float32))
    return np.stack(clips)


class KWS(nn.Module):
    def __init__(self, n_classes=35, width=64):
        super().__init__()
        layers, c = [], 1
        for w in (width, width * 2, width * 4, width * 4):
            layers += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2)]
            c = w
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, n_classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.batches is None:
        args.batches = 4 if args.small else 40
    if args.warmup is None:
        args.warmup = 1 if args.small else 3
    if args.small:
        args.batch, args.seconds = 4, 1.0
    device = torch.device(args.device)

    bank = make_clips(64, args.seconds)
    model = KWS(width=16 if args.small else 64).to(device).eval()
    counts = np.zeros(35, dtype=np.int64)

    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(args.batches):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                steady_start = time.perf_counter()
            idx = [(i * args.batch + j) % len(bank) for j in range(args.batch)]
            feats = np.stack([log_mel(bank[k]) for k in idx])          # (B, 80, frames)
            x = torch.from_numpy(feats).unsqueeze(1).to(device)
            x = (x - x.mean()) / (x.std() + 1e-5)
            pred = model(x).argmax(1)
            counts += np.bincount(pred.cpu().numpy(), minlength=35)
    if device.type == "cuda":
        torch.cuda.synchronize()
    end = time.perf_counter()

    n = args.batches - args.warmup
    print("RESULT " + json.dumps({"program": "audio_mel", "batches": n, "wall_s": round(end - start, 3),
                                  "steady_batches_per_s": n / (end - steady_start),
                                  "clips": int(counts.sum())}))


if __name__ == "__main__":
    main()
