"""analyze-trace against NVIDIA's own tools on one large trace, side by side, in one run.

    python benchmarks/analysis_speed.py [--copies 2000] [--repeat 3]

Builds out/bench/large.sqlite by replicating our real 3-step H200 `baseline` capture in time
(benchmarks/build_large_trace.py: ~1.7 M kernels, 3.4 M CUDA runtime rows, 5.5 M OS runtime rows, 0.5 GB),
then times, each on its own fresh copy (nsys writes into the files it reads):
  ours:    analyze-trace large.sqlite --json
  stats:   nsys stats --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,nvtx_sum
  analyze: nsys analyze -r gpu_gaps -r cuda_memcpy_async -r gpu_time_util
Wall time (median of --repeat) and peak RSS of the process tree, then the ratios the issue sets.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from nsys_transfer.nsys_core.nsys import find_nsys  # noqa: E402

MEASURE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
           "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
           "print(r.returncode, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def measure(cmd: list[str], env=None) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, env=env, check=True)
    rc, secs, rss_kb = out.stdout.split()
    if rc != "0":
        raise SystemExit(f"failed ({rc}): {' '.join(cmd)}")
    return float(secs), int(rss_kb) / 1024 / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = ROOT / "out" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    big = work / "large.sqlite"
    if not big.exists():
        print(f"building {big} ({args.copies} copies of the H200 baseline capture)...", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "build_large_trace.py"),
                        str(ROOT / "reports" / "data" / "h200" / "baseline.sqlite.xz"), str(big),
                        "--copies", str(args.copies)], check=True)
    nsys = find_nsys()
    analyze_trace = str(Path(sys.executable).parent / "analyze-trace")
    tools = {
        "analyze-trace --json": lambda f: [analyze_trace, str(f), "--json", str(work / "ours.json"), "-q"],
        "nsys stats (3 reports)": lambda f: [nsys.path, "stats", "--report",
                                              "cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,nvtx_sum", "--format", "csv",
                                              "--output", str(work / "stats"), "--force-overwrite=true", str(f)],
        "nsys analyze (3 rules)": lambda f: [nsys.path, "analyze", "-r", "gpu_gaps", "-r", "cuda_memcpy_async", "-r",
                                              "gpu_time_util", str(f)],
    }
    results = {}
    for name, cmd in tools.items():
        times, rss = [], 0.0
        for i in range(args.repeat):
            copy = work / f"copy-{i}.sqlite"
            shutil.copyfile(big, copy)
            secs, peak = measure(cmd(copy), env=nsys.env())
            times.append(secs)
            rss = max(rss, peak)
            copy.unlink()
            print(f"  {name}: run {i + 1}: {secs:.2f} s, peak RSS {peak:.2f} GiB", file=sys.stderr)
        results[name] = {"median_s": statistics.median(times), "runs_s": times, "peak_rss_gib": rss}
    ours, stats, nsa = (results[k]["median_s"] for k in tools)
    with __import__("sqlite3").connect(f"file:{big}?mode=ro", uri=True) as con:
        counts = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                  for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API")}
    print(f"\ntrace: {big.stat().st_size / 1e9:.2f} GB, {counts['CUPTI_ACTIVITY_KIND_KERNEL']:,} kernels, "
          f"{counts['CUPTI_ACTIVITY_KIND_RUNTIME']:,} runtime rows, {counts['OSRT_API']:,} OS runtime rows; "
          f"{os.cpu_count()} CPUs; nsys {nsys.version}; median of {args.repeat}")
    print("| tool | median s | runs s | peak RSS GiB |\n|---|---|---|---|")
    for k, r in results.items():
        print(f"| {k} | {r['median_s']:.2f} | {', '.join(f'{x:.2f}' for x in r['runs_s'])} | {r['peak_rss_gib']:.2f} |")
    print(f"\nanalyze-trace / nsys stats = {ours / stats:.2f} (goal <= 1.0); "
          f"analyze-trace / nsys analyze = {ours / nsa:.3f} (goal <= 0.2); "
          f"peak RSS {results['analyze-trace --json']['peak_rss_gib']:.2f} GiB (goal <= 2)")
    (work / "speed.json").write_text(json.dumps({"counts": counts, "results": results}, indent=2))


if __name__ == "__main__":
    main()
