"""Many per-rank traces, side by side in one run: analyze-trace one trace after the other, in worker processes and on
a local Dask cluster, against NVIDIA's `nsys recipe gpu_gaps` and `nsys recipe cuda_memcpy_async` over the same
folder (--mode concurrent and --mode dask-futures). Wall time and peak memory of each (for benchmarks only).

    python benchmarks/ranks_vs_recipe.py [--ranks 32] [--copies 1] [--out out/bench/ranks] [--workers 2] [--no-recipe]

The traces: benchmarks/build_rank_traces.py (the two real per-rank H200 captures, each replicated --copies times in
time, then varied per rank). nsys recipe reads the .sqlite export beside each .nsys-rep when the export is newer, so
each trace gets an empty placeholder .nsys-rep made before it (the recipe never opens it). The recipes need their
Python packages (nsys_recipe/requirements: pandas, pyarrow, psutil, dask, distributed) in the `python3` on PATH:
this script puts its own interpreter's folder first. Memory: the peak of the summed RSS of the command's whole
process tree (sampled every 50 ms with psutil), and the largest single process.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import build_rank_traces  # noqa: E402

from nsys_transfer.nsys_core.nsys import find_nsys  # noqa: E402


def measured(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(wall s, peak summed RSS GiB of the process tree, peak RSS GiB of its largest process) of one command."""
    t = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    tree_peak = one_peak = 0
    while proc.poll() is None:
        try:
            procs = [proc, *proc.children(recursive=True)]
            rss = [p.memory_info().rss for p in procs if p.is_running()]
        except psutil.Error:
            rss = []
        tree_peak, one_peak = max(tree_peak, sum(rss)), max([one_peak, *rss])
        time.sleep(0.05)
    took = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
    return took, tree_peak / 2**30, one_peak / 2**30


def traces(out: Path, ranks: int, copies: int) -> list[Path]:
    """The per-rank traces, each with its placeholder report made just before its export (ctime older)."""
    paths = sorted(out.glob("derived.rank*.sqlite"), key=lambda p: int(p.stem.split("rank")[1]))
    if len(paths) == ranks:
        return paths
    for p in out.glob("derived.rank*"):
        p.unlink()
    for i in range(ranks):
        (out / f"derived.rank{i}.nsys-rep").touch()
    time.sleep(1.1)  # the exports' ctime after the reports'
    return build_rank_traces.build(out, ranks, straggler=ranks // 2, copies=copies)


def commands(paths: list[Path], out: Path, workers: int, nsys: str) -> dict[str, list[str]]:
    """name -> command, over the same traces."""
    analyze = [sys.executable, "-m", "nsys_transfer.analysis", *map(str, paths), "-q", "--json"]
    recipe = [nsys, "recipe"]
    cmds = {"analyze-trace --jobs 1": [*analyze, str(out / "seq.json"), "--jobs", "1"],
            f"analyze-trace --jobs {workers}": [*analyze, str(out / "jobs.json"), "--jobs", str(workers)],
            f"analyze-trace --dask local:{workers}": [*analyze, str(out / "dask.json"), "--dask", f"local:{workers}"]}
    for name, extra in (("gpu_gaps", ["--gap", "1"]), ("cuda_memcpy_async", [])):
        for mode in ("concurrent", "dask-futures"):
            cmds[f"nsys recipe {name} --mode {mode}"] = [*recipe, name, "--input", str(out), "--output",
                                                         str(out / f"recipe-{name}-{mode}"), "--force-overwrite",
                                                         "--mode", mode, *extra]
    return cmds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "ranks")
    ap.add_argument("--no-recipe", action="store_true", help="analyze-trace alone (nsys recipe gpu_gaps's own SQL takes "
                    "minutes on longer rank traces)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    paths = traces(a.out, a.ranks, a.copies)
    size = sum(p.stat().st_size for p in paths) / 1e9
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cores = len(os.sched_getaffinity(0))
    print(f"{a.ranks} per-rank traces, {size:.2f} GB in all; {cores} cores; workers {a.workers}\n")
    print("| command | wall s | peak memory, all processes GiB | largest process GiB |")
    print("|---|---:|---:|---:|")
    nsys = "" if a.no_recipe else str(find_nsys().path)
    has_dask = importlib.util.find_spec("distributed") is not None
    for name, cmd in commands(paths, a.out, a.workers, nsys).items():
        if (a.no_recipe and name.startswith("nsys recipe")) or ("dask" in name and not has_dask):
            why = "--no-recipe" if a.no_recipe and name.startswith("nsys recipe") else "no dask here"
            print(f"| `{name}` | (not run: {why}) | | |")
            continue
        took, tree, one = measured(cmd, env)
        print(f"| `{name}` | {took:.1f} | {tree:.2f} | {one:.2f} |", flush=True)
    docs = {p.name: p.read_bytes() for p in (a.out / "seq.json", a.out / "jobs.json", a.out / "dask.json")
            if p.exists()}
    print(f"\nanalyze-trace's JSON the same in {', '.join(docs)}: {'yes' if len(set(docs.values())) == 1 else 'NO'}")


if __name__ == "__main__":
    main()
