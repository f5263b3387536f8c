"""A Hugging Face transformers text-generation loop, written the way users write it.

GPT2LMHeadModel(GPT2Config()) with random weights (nothing is downloaded; random input_ids stand in for a
tokenizer), batch 16, 32 new tokens, greedy `model.generate()`. One warm-up request, then each request in an
NVTX range "request N"; the generated ids come back with `.cpu().tolist()` as users do before decoding.
`--torch-profiler` instead runs one request under torch.profiler (CPU + CUDA activities) and prints how many
GPU events (kernels + memcpy + memset) it saw: compare with the kernels in an nsys trace of one "request N".

usage:  python3 tests/programs/hf_generate.py [--device cuda] [--requests 4] [--batch-size 16] [--new-tokens 32]
        python3 tests/programs/hf_generate.py --device cuda --torch-profiler
trace:  python3 -m nsys_transfer.profiling run -o runs/hf_generate --trace cuda,nvtx,osrt --no-capture-range -- \
            python3 tests/programs/hf_generate.py --device cuda
        .venv/bin/analyze-trace runs/hf_generate.sqlite
(the whole program is captured: no cudaProfilerStart/Stop; "request 0" is the warm-up.)
"""
import argparse
import collections
import json
import os
import tempfile
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--requests", type=int, default=4, help="requests after the warm-up one")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--layers", type=int, default=12, help="GPT2Config n_layer (12 = gpt2 small)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--torch-profiler", action="store_true",
                   help="run one request under torch.profiler and print its GPU event counts (no NVTX loop)")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)

    config = GPT2Config(n_layer=args.layers)
    model = GPT2LMHeadModel(config).to(device=device, dtype=getattr(torch, args.dtype)).eval()

    def request(i):
        input_ids = torch.randint(0, config.vocab_size, (args.batch_size, args.prompt_len))
        attention_mask = torch.ones_like(input_ids)
        with torch.no_grad():
            out = model.generate(input_ids.to(device), attention_mask=attention_mask.to(device),
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                                 pad_token_id=config.eos_token_id)
        return out[:, args.prompt_len:].cpu().tolist()

    with torch.cuda.nvtx.range("request 0"):  # warm-up: cuBLAS handles, module loading, caches
        request(0)

    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            with torch.cuda.nvtx.range("request 1"):
                request(1)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
        cats = collections.Counter(e.get("cat", "") for e in events if e.get("ph") == "X")
        gpu = {k: cats.get(k, 0) for k in ("kernel", "gpu_memcpy", "gpu_memset")}
        result = {"torch": torch.__version__, "gpu_events": sum(gpu.values()), **gpu,
                  "cuda_runtime": cats.get("cuda_runtime", 0), "cuda_driver": cats.get("cuda_driver", 0),
                  "cpu_op": cats.get("cpu_op", 0)}
        print("torch.profiler one request: " + json.dumps(result))
        return

    t0 = time.perf_counter()
    tokens = 0
    for i in range(1, args.requests + 1):
        with torch.cuda.nvtx.range(f"request {i}"):
            generated = request(i)
        tokens += sum(len(g) for g in generated)
    dt = time.perf_counter() - t0
    print(f"gpt2 (random weights, {args.layers} layers, {args.dtype}) {device}: {args.requests} requests x "
          f"{args.batch_size} x {args.new_tokens} new tokens in {dt:.2f} s = {tokens / dt:.0f} tokens/s, "
          f"{dt / args.requests * 1e3:.0f} ms/request")


if __name__ == "__main__":
    main()
