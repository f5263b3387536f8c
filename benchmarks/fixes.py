"""The fixes library on programs nobody here wrote: each program unprofiled before its fix, after it, and its own
ceiling (the same program without the transfers: the GPU's work alone; where the CPU's post-processing is the
heavier half, that half alone too), in one run; and the article's job (the workloads' pinned stage on the library)
in fp32 and in bf16 channels_last against its compute ceiling. Prints a table and writes JSON.

    python benchmarks/fixes.py [--repeat 3] [--out out/fixes.json] [--only seg_logits,...]

Needs a GPU. The fixed runs verify every batch (NSYS_TRANSFER_VERIFY=1, or the workloads' own check: checksums on
the GPU and in the workers); the table's last column is their verdict. Programs: tests/programs/NAME.py and
NAME_fixed.py (docs/fixes.md)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTICLE = ["--steps", "30", "--warmup", "5"]
# name: variant -> (program or "workloads", arguments): the sizes docs/benchmarks.md reports
CASES = {
    "hf_embed": {"ceiling": ("hf_embed", ["--ceiling"]), "before": ("hf_embed", []), "after": ("hf_embed_fixed", [])},
    "seg_logits": {"ceiling": ("seg_logits", ["--ceiling"]), "host": ("seg_logits", ["--ceiling", "host"]),
                   "before": ("seg_logits", []), "after": ("seg_logits_fixed", [])},
    "image_loop": {"ceiling": ("image_loop", ["--ceiling"]), "before": ("image_loop", []),
                   "after": ("image_loop_fixed", [])},
    "article_fp32": {"ceiling": ("workloads", ["--stage", "ceiling"]), "before": ("workloads", ["--stage", "streams"]),
                     "after": ("workloads", ["--stage", "pinned"])},
    "article_bf16": {"ceiling": ("workloads", ["--stage", "ceiling", "--dtype", "bf16", "--channels-last"]),
                     # half the bytes of fp32: 6 output workers keep up, and leave the launching thread its cores
                     "after": ("workloads", ["--stage", "pinned", "--dtype", "bf16", "--channels-last",
                                             "--output-workers", "6"])},
}
SIZES = {"hf_embed": ["--batches", "24", "--warmup", "4"], "seg_logits": ["--batches", "24", "--warmup", "4"],
         "image_loop": ["--batches", "40", "--warmup", "5"]}


def run_workload(args: list, python: str, timeout: float) -> dict:
    """One run of the article's job: steps/s and the integrity verdict from its run record."""
    out = ROOT / "out" / "fixes-workload.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([python, "-m", "workloads", *args, *ARTICLE, "--json", str(out)], capture_output=True, text=True,
                       timeout=timeout, env=env, cwd=ROOT)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]}
    rec = json.loads(out.read_text())
    integ = rec["integrity"]
    verdict = None if not integ["checked"] else ("all batches arrived exactly once, intact" if integ["ok"] else
                                                 "INTEGRITY FAILED")
    return {"batches_per_s": rec["throughput"]["steps_per_s"], "integrity": verdict}


def run_once(program: str, args: list, python: str, timeout: float) -> dict:
    """One run: its RESULT record, and the pipeline's integrity verdict when it printed one."""
    if program == "workloads":
        return run_workload(args, python, timeout)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSYS_TRANSFER_VERIFY": "1", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([python, str(ROOT / "tests" / "programs" / f"{program}.py"), "--device", "cuda", *args],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    lines = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]}
    out = json.loads(lines[-1][7:])
    said = [x for x in r.stderr.splitlines() if "batches arrived" in x or "INTEGRITY" in x]
    out["integrity"] = said[-1].split(": ", 1)[-1] if said else None
    return out


def measure(name: str, repeat: int, python: str, timeout: float) -> dict:
    """Ceiling, before and after, `repeat` times each, interleaved (the machine drifts less between neighbours)."""
    variants = {v: (prog, a + SIZES.get(name, [])) for v, (prog, a) in CASES[name].items()}
    runs = {v: [] for v in variants}
    for _ in range(repeat):
        for v, (prog, a) in variants.items():
            runs[v].append(run_once(prog, a, python, timeout))
            print(f"  {name} {v}: {runs[v][-1].get('batches_per_s', runs[v][-1].get('error'))}", file=sys.stderr)
    row = {"case": name, "variants": variants, "runs": runs}
    for v in ("ceiling", "host", "before", "after"):
        rates = [r["batches_per_s"] for r in runs.get(v, []) if "batches_per_s" in r]
        row[f"{v}_batches_per_s"] = statistics.median(rates) if rates else None
    c = row["ceiling_batches_per_s"]
    for v in ("before", "after"):
        row[f"{v}_of_ceiling"] = row[f"{v}_batches_per_s"] / c if c and row[f"{v}_batches_per_s"] else None
    bounds = [x for x in (c, row["host_batches_per_s"]) if x]
    row["after_of_bound"] = row["after_batches_per_s"] / min(bounds) if bounds and row["after_batches_per_s"] else None
    verdicts = {r.get("integrity") for r in runs["after"]}
    row["after_integrity"] = verdicts.pop() if len(verdicts) == 1 else " / ".join(map(str, verdicts))
    return row


def table(rows: list) -> str:
    """The rows as a Markdown table."""
    f = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    out = ["| program | GPU ceiling batches/s | host ceiling | before | x ceiling | after | x ceiling | "
           "x the lower ceiling | speed-up | integrity after |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        b, a = r["before_batches_per_s"], r["after_batches_per_s"]
        out.append(f"| {r['case']} | {f(r['ceiling_batches_per_s'], '.3f')} | {f(r['host_batches_per_s'], '.3f')} | "
                   f"{f(b, '.3f')} | "
                   f"{f(r['before_of_ceiling'], '.2f')} | {f(a, '.3f')} | {f(r['after_of_ceiling'], '.2f')} | "
                   f"{f(r['after_of_bound'], '.2f')} | "
                   f"{f(a / b if a and b else None, '.2f')} | {r['after_integrity']} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default=",".join(CASES))
    p.add_argument("--out", default="out/fixes.json")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()
    rows = [measure(n, a.repeat, a.python, a.timeout) for n in a.only.split(",")]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(rows, indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
