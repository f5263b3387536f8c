"""A PyTorch inference loop on the CPU, without NVTX ranges: what a user traces on a machine without a GPU.

usage: cpu_infer.py [STEPS]
"""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
device = "cuda" if torch.cuda.is_available() and "--cuda" in sys.argv else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device).eval()
with torch.no_grad():
    for _ in range(steps):
        out = model(torch.randn(64, 256, device=device)).argmax(1).cpu()
print(f"done {steps} steps on {device}: {out[:4].tolist()}")
