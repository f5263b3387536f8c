"""An inference loop that waits for its weights, written the way such loops get written: layers offloaded to the
host are made ready one at a time inside the step (here a sleep stands in for reading them from disk or a remote
store), then each layer runs. The GPU idles while the launching thread sleeps: a wait, not CPU work.

Each step is an NVTX range "step N"; the wait is a range "ensure_layer_weights" around `time.sleep`.

usage:  python3 tests/programs/sleepy_weights.py [--steps 8] [--layers 8] [--wait-ms 5]
trace:  python3 -m nsys_transfer.profiling run -o runs/sleepy -- python3 tests/programs/sleepy_weights.py
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda"], help="the GPU (this program needs one)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--wait-ms", type=float, default=5.0, help="how long each layer's weights take to arrive")
    args = p.parse_args()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(args.width, args.width).to(args.device) for _ in range(args.layers)]
    x = torch.randn(args.batch, args.width, device=args.device)
    for layer in layers:  # warm-up: cuBLAS handles
        layer(x)
    torch.cuda.synchronize()
    sums = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.steps):
            with torch.cuda.nvtx.range(f"step {i}"):
                h = x
                for layer in layers:
                    with torch.cuda.nvtx.range("ensure_layer_weights"):
                        time.sleep(args.wait_ms / 1e3)  # the weights arriving from storage
                    h = torch.relu(layer(h))
                sums.append(float(h.sum().cpu()))
    print(json.dumps({"steps": args.steps, "steps_per_s": round(args.steps / (time.perf_counter() - t0), 2),
                      "finite": all(s == s for s in sums)}))


if __name__ == "__main__":
    main()
