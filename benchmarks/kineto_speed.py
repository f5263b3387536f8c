"""Time and peak memory of analyze-trace on a large torch.profiler (Kineto) trace, side by side with HTA (Holistic
Trace Analysis: its TraceAnalysis load plus its idle-time breakdown) on the same file (issue 51, docs/benchmarks.md).

The input is a BENCHMARK INPUT, not a test fixture: the events of one real recording (--seed, default a CPU recording
of tests/programs/kineto_loop.py made here) repeated until the file reaches --gb, each copy shifted in time past the
one before, with its Python ids, correlation ids, external ids and step numbers shifted too so that every call tree,
every kernel's runtime call and every ProfilerStep#N stays distinct. It is written one event a line (compact JSON):
more events per GB than Kineto's own indented output, so the harder case for both readers.

    python benchmarks/kineto_speed.py --gb 2 [--seed TRACE.json[.gz]] [--hta /tmp/hta-venv/bin/python]
                                      [--hta-gb 0.25] [--keep]

Each run is a child process measured by os.wait4 (peak RSS: ru_maxrss of that process); analyze-trace runs with an
empty cache, so its time includes the conversion, then once more with the conversion cached. HTA runs under an
address-space limit (--hta-limit-gb) so that a load too big for the machine fails instead of swapping it: it is then
measured on a --hta-gb file as well, and the table says so.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP = re.compile(r"^ProfilerStep#(\d+)$")
HTA_SCRIPT = """
import sys, time
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
idle = a.get_idle_time_breakdown(visualize=False)
t2 = time.perf_counter()
print(f"HTA load_s={t1 - t0:.1f} idle_s={t2 - t1:.1f}")
print(idle[0].head(8).to_string() if isinstance(idle, tuple) else idle)
"""


def record_seed(folder: Path) -> Path:
    out = folder / "seed.pt.trace.json.gz"
    subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "kineto_loop.py"), str(out), "--steps", "40"],
                   cwd=folder, check=True, capture_output=True)
    return out


def read(path: Path) -> dict:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        return json.load(f)


def build(seed: Path, out: Path, gb: float) -> dict:
    """Write the benchmark input: the seed's events repeated to `gb` GB. Returns its figures."""
    doc = read(seed)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    lo = min(e["ts"] for e in events)
    span = max(e["ts"] + e.get("dur", 0) for e in events) - lo + 1000.0  # a ms between copies

    def top(key):
        return max([int(e.get("args", {}).get(key, 0) or 0) for e in events] + [0]) + 1
    py, corr, ext = top("Python id"), top("correlation"), top("External id")
    steps = max([int(m.group(1)) for e in events for m in [STEP.match(str(e.get("name", "")))] if m] + [0]) + 1
    header = {k: v for k, v in doc.items() if k not in ("traceEvents", "traceName")}
    target, written, copies, n_events = int(gb * (1 << 30)), 0, 0, 0
    with open(out, "w") as f:
        head = json.dumps(header)[:-1] + ', "traceEvents": [\n'
        f.write(head)
        written += len(head)
        for e in meta:
            line = json.dumps(e, separators=(",", ":")) + ",\n"
            f.write(line)
            written += len(line)
        while written < target:
            shift = copies * span
            for e in events:
                c = dict(e)
                c["ts"] = round(e["ts"] + shift, 3)
                args = e.get("args")
                if args:
                    a = dict(args)
                    for key, step in (("Python id", py), ("Python parent id", py), ("correlation", corr),
                                      ("External id", ext)):
                        if key in a and isinstance(a[key], int):
                            a[key] += copies * step
                    c["args"] = a
                m = STEP.match(str(e.get("name", "")))
                if m:
                    c["name"] = f"ProfilerStep#{int(m.group(1)) + copies * steps}"
                line = json.dumps(c, separators=(",", ":")) + ",\n"
                f.write(line)
                written += len(line)
            copies += 1
            n_events += len(events)
        f.write('{"ph":"i","s":"g","name":"Record Window End","pid":"","tid":"","ts":%.3f}\n]}\n' % (lo + copies * span))
    return {"bytes": out.stat().st_size, "events": n_events, "copies": copies, "seed_events": len(events)}


def measure(cmd: list[str], env: dict | None = None, limit_gb: float | None = None) -> dict:
    """Wall time, peak RSS (MiB), exit code and the last lines of output of one child process."""
    def limit():
        if limit_gb:
            size = int(limit_gb * (1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (size, size))
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        tail = log.read()[-1500:]
    return {"s": round(time.perf_counter() - t0, 1), "rss_mib": round(usage.ru_maxrss / 1024), "rc": proc.returncode,
            "tail": tail}


def ours(trace: Path, work: Path) -> tuple[dict, dict]:
    env = {**os.environ, "NSYS_TRANSFER_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "nsys_transfer.analysis", str(trace), "--json", str(work / "ours.json")]
    return measure(cmd, env), measure(cmd, env)  # converted, then the conversion cached


def hta(python: str, trace: Path, work: Path, limit_gb: float) -> dict:
    folder = work / f"hta-{trace.stem}"
    folder.mkdir(exist_ok=True)
    link = folder / "rank0.json"  # HTA reads every trace file of a folder
    if not link.exists():
        link.symlink_to(trace)
    script = work / "hta_run.py"
    script.write_text(HTA_SCRIPT)
    return measure([python, str(script), str(folder)], limit_gb=limit_gb)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gb", type=float, default=2.0)
    p.add_argument("--seed", type=Path)
    p.add_argument("--hta", help="the Python of a scratch venv with HolisticTraceAnalysis installed")
    p.add_argument("--hta-gb", type=float, default=0.25, help="a smaller file for HTA when the big one fails")
    p.add_argument("--hta-limit-gb", type=float, default=16.0)
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "kineto-bench")
    p.add_argument("--keep", action="store_true", help="keep the benchmark inputs")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    seed = args.seed or record_seed(args.work)
    sizes = [args.gb] + ([args.hta_gb] if args.hta and args.hta_gb and args.hta_gb != args.gb else [])
    rows = []
    for gb in sizes:
        big = args.work / f"bench_{gb:g}gb.pt.trace.json"
        figures = build(seed, big, gb) if not big.exists() else {"bytes": big.stat().st_size}
        print(f"input {big.name}: {figures}", flush=True)
        first, cached = ours(big, args.work)
        rows.append({"gb": gb, "who": "analyze-trace (conversion + analysis)", **first})
        rows.append({"gb": gb, "who": "analyze-trace (conversion cached)", **cached})
        if args.hta:
            rows.append({"gb": gb, "who": "HTA TraceAnalysis + get_idle_time_breakdown", **hta(args.hta, big,
                                                                                           args.work,
                                                                                           args.hta_limit_gb)})
        for r in rows[-3:]:
            print(f"{r['gb']:g} GB  {r['who']}: {r['s']} s, peak RSS {r['rss_mib']} MiB, exit {r['rc']}", flush=True)
            if r["rc"]:
                print("   " + r["tail"][-600:].replace("\n", "\n   "))
        if not args.keep:
            big.unlink()
    print(json.dumps([{k: v for k, v in r.items() if k != "tail"} for r in rows], indent=1))


if __name__ == "__main__":
    main()
