"""analyze-trace against NVIDIA's own tools on large traces, side by side, in one run.

    python benchmarks/analysis_speed.py [--size 0.5 2] [--repeat 3]      (make benchmark-analysis [SIZE=8])

For each size (GB), builds out/bench/large-<size>g.sqlite by replicating our real 3-step H200 `baseline` capture in
time (benchmarks/build_large_trace.py: 2000 copies per 0.5 GB: ~1.7 M kernels, 3.4 M CUDA runtime rows, 5.5 M OS
runtime rows), then times, each on its own fresh copy (nsys writes into the files it reads):
  ours:    analyze-trace large.sqlite --json
  stats:   nsys stats --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,nvtx_sum
  analyze: nsys analyze -r gpu_gaps -r cuda_memcpy_async -r gpu_time_util
Wall time (median of --repeat; sizes above 0.5 GB run once) and peak RSS of the process tree, then the ratios the
issue sets. `--skip-analyze` leaves out nsys analyze (minutes on the big traces).
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


COPIES_PER_GB = 4000  # copies of the 3-step capture per GB of export


def build(work: Path, size_gb: float) -> Path:
    """The replicated trace of about size_gb (built once, kept in out/bench)."""
    big = work / f"large-{size_gb:g}g.sqlite"
    if not big.exists():
        copies = max(1, round(size_gb * COPIES_PER_GB))
        print(f"building {big} ({copies} copies of the H200 baseline capture)...", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "build_large_trace.py"),
                        str(ROOT / "reports" / "data" / "h200" / "baseline.sqlite.xz"), str(big),
                        "--copies", str(copies)], check=True)
    return big


def tools(work: Path, nsys, skip_analyze: bool) -> dict:
    """name -> command for one trace copy."""
    analyze_trace = str(Path(sys.executable).parent / "analyze-trace")
    out = {
        "analyze-trace --json": lambda f: [analyze_trace, str(f), "--json", str(work / "ours.json"), "-q"],
        "nsys stats (3 reports)": lambda f: [nsys.path, "stats", "--report",
                                              "cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,nvtx_sum", "--format", "csv",
                                              "--output", str(work / "stats"), "--force-overwrite=true", str(f)],
    }
    if not skip_analyze:
        out["nsys analyze (3 rules)"] = lambda f: [nsys.path, "analyze", "-r", "gpu_gaps", "-r", "cuda_memcpy_async",
                                                    "-r", "gpu_time_util", str(f)]
    return out


def run_size(work: Path, big: Path, nsys, repeat: int, skip_analyze: bool) -> dict:
    """Each tool's median wall time and peak RSS on fresh copies of `big`."""
    results = {}
    for name, cmd in tools(work, nsys, skip_analyze).items():
        times, rss = [], 0.0
        for i in range(repeat):
            copy = work / f"copy-{i}.sqlite"
            shutil.copyfile(big, copy)
            secs, peak = measure(cmd(copy), env=nsys.env())
            times.append(secs)
            rss = max(rss, peak)
            copy.unlink()
            print(f"  {big.name}: {name}: run {i + 1}: {secs:.2f} s, peak RSS {peak:.2f} GiB", file=sys.stderr)
        results[name] = {"median_s": statistics.median(times), "runs_s": times, "peak_rss_gib": rss}
    with __import__("sqlite3").connect(f"file:{big}?mode=ro", uri=True) as con:
        counts = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                  for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API")}
    return {"gb": big.stat().st_size / 1e9, "counts": counts, "results": results}


def report(size: dict, repeat: int, nsys) -> None:
    """The table and the ratios of one size."""
    c, results = size["counts"], size["results"]
    print(f"\ntrace: {size['gb']:.2f} GB, {c['CUPTI_ACTIVITY_KIND_KERNEL']:,} kernels, "
          f"{c['CUPTI_ACTIVITY_KIND_RUNTIME']:,} runtime rows, {c['OSRT_API']:,} OS runtime rows; "
          f"{os.cpu_count()} CPUs; nsys {nsys.version}; median of {repeat}")
    print("| tool | median s | runs s | peak RSS GiB |\n|---|---|---|---|")
    for k, r in results.items():
        print(f"| {k} | {r['median_s']:.2f} | {', '.join(f'{x:.2f}' for x in r['runs_s'])} | {r['peak_rss_gib']:.2f} |")
    ours = results["analyze-trace --json"]
    line = f"analyze-trace / nsys stats = {ours['median_s'] / results['nsys stats (3 reports)']['median_s']:.2f}"
    if "nsys analyze (3 rules)" in results:
        line += f"; analyze-trace / nsys analyze = {ours['median_s'] / results['nsys analyze (3 rules)']['median_s']:.3f}"
    print(f"{line}; analyze-trace peak RSS {ours['peak_rss_gib']:.2f} GiB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=float, nargs="+", default=[0.5, 2.0], help="trace sizes in GB (default 0.5 2)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool on the 0.5 GB trace (larger: one)")
    ap.add_argument("--skip-analyze", action="store_true", help="leave out nsys analyze")
    args = ap.parse_args()
    work = ROOT / "out" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    nsys = find_nsys()
    sizes = {}
    for gb in args.size:
        repeat = args.repeat if gb <= 0.5 else 1
        sizes[f"{gb:g}"] = run_size(work, build(work, gb), nsys, repeat, args.skip_analyze)
        report(sizes[f"{gb:g}"], repeat, nsys)
    (work / "speed.json").write_text(json.dumps(sizes, indent=2))


if __name__ == "__main__":
    main()
