"""A CuPy program on CUDA managed (unified) memory, written the way users write it: the host fills the input in place,
the GPU computes on it, the host reads the result in place. Every touch of a page on the other side is a page fault
and a migration by the driver (CUPTI memcpy rows of copyKind 11/12 with no API call behind them).

CuPy's memory pool allocates with cudaMallocManaged (`cupy.cuda.malloc_managed`); the host sees the same memory
through a NumPy view of its pointer. Each step is an NVTX range "step N". `--prefetch` is the fix: the pages are moved
ahead in bulk with cudaMemPrefetchAsync (to the GPU before the kernels, back to the host before the read).

usage:  python3 tests/programs/managed_memory.py [--steps 10] [--mib 256] [--prefetch]
trace:  python3 -m nsys_transfer.profiling run -o runs/um -- python3 tests/programs/managed_memory.py
"""
import argparse
import ctypes
import json
import time

import cupy as cp
import numpy as np

CPU_DEVICE = -1  # cudaCpuDeviceId


def host_view(a: cp.ndarray) -> np.ndarray:
    """The managed array's memory as a NumPy array (no copy: the host touches the pages themselves)."""
    buf = (ctypes.c_byte * a.nbytes).from_address(a.data.ptr)
    return np.frombuffer(buf, dtype=a.dtype).reshape(a.shape)


def prefetch(a: cp.ndarray, device: int, stream) -> bool:
    """Move the array's pages in bulk (cudaMemPrefetchAsync) to a GPU or (CPU_DEVICE) to the host; False where this
    CuPy/CUDA cannot."""
    try:
        if device != CPU_DEVICE:
            cp.cuda.runtime.memPrefetchAsync(a.data.ptr, a.nbytes, device, stream.ptr)
            return True
        # CUDA 13 names the host by a cudaMemLocation, which CuPy's int device cannot say: cuda-python can
        from cuda.bindings import runtime as cudart
        where = cudart.cudaMemLocation()
        where.type = cudart.cudaMemLocationType.cudaMemLocationTypeHost
        err, = cudart.cudaMemPrefetchAsync(a.data.ptr, a.nbytes, where, 0, stream.ptr)
        if err != cudart.cudaError_t.cudaSuccess:
            raise RuntimeError(str(err))
        return True
    except Exception as e:  # older CuPy or cuda-python builds lack these calls
        print(json.dumps({"prefetch_error": f"to {'host' if device == CPU_DEVICE else device}: {str(e)[:200]}"}))
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda"], help="the GPU (these programs need one)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--mib", type=int, default=256, help="size of the input (the output is as large)")
    p.add_argument("--prefetch", action="store_true", help="cudaMemPrefetchAsync both ways (the fix)")
    args = p.parse_args()
    cp.cuda.set_allocator(cp.cuda.MemoryPool(cp.cuda.malloc_managed).malloc)
    n = args.mib * (1 << 20) // 4
    x, y = cp.empty(n, cp.float32), cp.empty(n, cp.float32)
    hx, hy = host_view(x), host_view(y)
    stream, dev = cp.cuda.get_current_stream(), cp.cuda.Device().id
    rng = np.random.default_rng(0)
    ok, to_gpu, to_host = True, args.prefetch, args.prefetch
    t0 = time.perf_counter()
    for i in range(args.steps):
        cp.cuda.nvtx.RangePush(f"step {i}")
        hx[:] = rng.standard_normal(n, dtype=np.float32)  # the host writes the input in place
        if to_gpu:
            to_gpu = prefetch(x, dev, stream) and prefetch(y, dev, stream)
        cp.multiply(x, 2.0, out=y)
        cp.sqrt(cp.abs(y), out=y)
        if to_host:
            to_host = prefetch(y, CPU_DEVICE, stream) and prefetch(x, CPU_DEVICE, stream)
        stream.synchronize()
        ok &= bool(np.allclose(hy[:1024], np.sqrt(np.abs(2 * hx[:1024]))))  # the host reads the result in place
        total = float(hy.sum(dtype=np.float64))
        cp.cuda.nvtx.RangePop()
    print(json.dumps({"steps": args.steps, "mib": args.mib, "prefetch_to_gpu": to_gpu, "prefetch_to_host": to_host,
                      "steps_per_s": round(args.steps / (time.perf_counter() - t0), 3), "correct": ok,
                      "finite": total == total}))


if __name__ == "__main__":
    main()
