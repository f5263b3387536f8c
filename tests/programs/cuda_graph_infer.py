"""An inference loop served from a CUDA graph, written the way users write it (`torch.cuda.CUDAGraph`).

A small transformer encoder (random weights, nothing downloaded) runs on a static input buffer; the forward pass is
captured once into a CUDA graph after a warm-up on a side stream (PyTorch's documented recipe), then every request
copies its input into the static buffer, replays the graph and brings the pooled output back with `.cpu()`. Each
request is an NVTX range "request N". With `--compile`, `torch.compile(mode="reduce-overhead")` makes the graphs
instead (the other way users get them).

usage:  python3 tests/programs/cuda_graph_infer.py [--requests 20] [--batch-size 32] [--seq 256] [--compile]
trace:  python3 -m nsys_transfer.profiling run -o runs/graphs -- python3 tests/programs/cuda_graph_infer.py
        (nsys records each replay as one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row by default; add
        --cuda-graph-trace=node to nsys for the kernels inside)
"""
import argparse
import json

import torch


def build(args, device):
    layer = torch.nn.TransformerEncoderLayer(d_model=args.width, nhead=8, dim_feedforward=4 * args.width,
                                             batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=args.layers).to(device).eval()


def graphed(model, static_in):
    """The model's forward captured into a CUDA graph; returns (graph, static output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):  # warm-up outside the graph: cuBLAS handles and the allocator's pools
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_out = model(static_in).mean(dim=1)
    return graph, static_out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda"], help="the GPU (these programs need one)")
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--compile", action="store_true", help='torch.compile(mode="reduce-overhead") makes the graphs')
    args = p.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = build(args, device)
    shape = (args.batch_size, args.seq, args.width)
    if args.compile:
        compiled = torch.compile(lambda x: model(x).mean(dim=1), mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(3):
                compiled(torch.randn(shape, device=device))

        def run(x):
            with torch.no_grad():
                return compiled(x.to(device, non_blocking=False)).clone()
    else:
        static_in = torch.randn(shape, device=device)
        graph, static_out = graphed(model, static_in)

        def run(x):
            static_in.copy_(x)
            graph.replay()
            return static_out
    sums = []
    for i in range(args.requests):
        with torch.cuda.nvtx.range(f"request {i}"):
            x = torch.randn(shape)  # the request's input, made on the host as a server receives it
            y = run(x).cpu()
            sums.append(float(y.double().sum()))
    print(json.dumps({"requests": args.requests, "finite": all(s == s for s in sums), "compile": args.compile}))


if __name__ == "__main__":
    main()
