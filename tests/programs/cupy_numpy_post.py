"""A CuPy spectral job with NumPy post-processing, written the way its users write it.

Per step: a batch of signals made on the GPU, windowed, their power spectra by FFT (`cp.fft.rfft`) and a
cross-power matrix (a matmul) on the GPU; the spectra come back with `cp.asnumpy`, and NumPy on the main thread
takes each signal's peak (argmax), its strongest bins (sort) and a histogram of the log power. Each step inside an
NVTX range `step N` where the `nvtx` package is installed (none without it). --device cpu runs the same code on
NumPy alone (no CuPy needed).

usage:  python3 tests/programs/cupy_numpy_post.py [--device cuda] [--steps 12] [--warmup 2] [--signals 256]
        [--length 65536]
"""
import argparse
import contextlib
import json
import time

import numpy as np

try:
    import nvtx
except ImportError:
    nvtx = None


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2, help="steps before the clock starts")
    p.add_argument("--signals", type=int, default=256)
    p.add_argument("--length", type=int, default=65536, help="samples per signal")
    p.add_argument("--top", type=int, default=32, help="strongest bins kept per signal")
    return p.parse_args()


def step_range(i):
    return nvtx.annotate(f"step {i}") if nvtx is not None else contextlib.nullcontext()


def postprocess(power, top):
    """NumPy on the host: peak bin, strongest bins and a log-power histogram of each signal."""
    peaks = power.argmax(axis=1)
    strongest = np.sort(power, axis=1)[:, -top:]
    hist, _ = np.histogram(np.log10(power + 1e-12), bins=64, range=(-12.0, 12.0))
    return peaks, strongest, hist


def main():
    args = arguments()
    if args.device == "cpu":
        xp = np
    else:
        import cupy as xp
    rng = xp.random.default_rng(0)
    window = xp.hanning(args.length).astype(xp.float32)
    hist_total = np.zeros(64, dtype=np.int64)
    for i in range(args.steps):
        if i == args.warmup:
            if xp is not np:
                xp.cuda.get_current_stream().synchronize()
            t0 = time.perf_counter()
        with step_range(i):
            signals = rng.standard_normal((args.signals, args.length), dtype=xp.float32) * window
            spectra = xp.fft.rfft(signals, axis=1)
            power = (spectra.real ** 2 + spectra.imag ** 2).astype(xp.float32)
            cross = power[:, :4096] @ power[:, :4096].T  # signal-to-signal similarity of the low band
            power = power / cross.diagonal()[:, None] ** 0.5
            host = xp.asnumpy(power) if xp is not np else power
            peaks, strongest, hist = postprocess(host, args.top)
            hist_total += hist
    seconds = time.perf_counter() - t0
    measured = args.steps - args.warmup
    print("RESULT " + json.dumps({"program": "cupy_numpy_post", "steps": measured, "nvtx": nvtx is not None,
                                  "counted": int(hist_total.sum()), "mean_peak": float(peaks.mean()),
                                  "steps_per_s": measured / seconds}))


if __name__ == "__main__":
    main()
