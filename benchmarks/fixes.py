"""The fixes library on programs nobody here wrote: each program unprofiled before its fix, after it, and its own
ceiling (the same program without the transfers: the GPU's work alone; where the CPU's post-processing is the
heavier half, that half alone too), in one run; and the article's job (the workloads' pinned stage on the library)
in fp32 and in bf16 channels_last against its compute ceiling. Prints a table and writes JSON.

    python benchmarks/fixes.py [--repeat 3] [--out out/fixes.json] [--only seg_logits,...] [--verify]

--verify: each program's before and after are also captured (`nsys-transfer run --sample none --python-backtrace
none`: sampling with stacks slows a CPU-heavy side more than the other; nsys from $NSYS) and compared by
`nsys-transfer verify`: its speed-up is printed beside the unprofiled one measured in the same run, and their ratio
(issue 37: within 15%). --skip ceiling,host leaves the ceilings out (the speed-ups only). The captures are kept under out/fixes-captures/ (.sqlite.xz).

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
    # the fix moves the CPU argmax out of the step ranges into the pipeline's workers
    "seg_cpu_argmax": {"ceiling": ("seg_cpu_argmax", ["--ceiling"]), "before": ("seg_cpu_argmax", []),
                       "after": ("seg_cpu_argmax_fixed", [])},
    # the fix moves the tokenizing off the launching thread into DataLoader workers (no NVTX: no steps)
    "tokenize_embed": {"ceiling": ("tokenize_embed", ["--ceiling"]), "before": ("tokenize_embed", []),
                       "after": ("tokenize_embed_fixed", [])},
    # a short run pays the pipeline's set-up: 16 batches, no warm-up excluded, against the same 16 of the model alone
    "embed_16": {"ceiling": ("hf_embed", ["--ceiling"]), "before": ("hf_embed", []), "after": ("hf_embed_fixed", [])},
    # the same with each batch's rows cut across 2 or 4 workers: the last batch's post-processing, on the clock after
    # the GPU's last batch, is done that many times sooner (split=k forks k workers at the first submit, not 2)
    "embed_16_split2": {"ceiling": ("hf_embed", ["--ceiling"]), "after": ("hf_embed_fixed", ["--split", "2"])},
    "embed_16_split4": {"ceiling": ("hf_embed", ["--ceiling"]), "after": ("hf_embed_fixed", ["--split", "4"])},
    "article_fp32": {"ceiling": ("workloads", ["--stage", "ceiling"]), "before": ("workloads", ["--stage", "streams"]),
                     "after": ("workloads", ["--stage", "pinned"])},
    "article_bf16": {"ceiling": ("workloads", ["--stage", "ceiling", "--dtype", "bf16", "--channels-last"]),
                     # half the bytes of fp32: 6 output workers keep up, and leave the launching thread its cores
                     "after": ("workloads", ["--stage", "pinned", "--dtype", "bf16", "--channels-last",
                                             "--output-workers", "6"])},
}
SIZES = {"hf_embed": ["--batches", "24", "--warmup", "4"], "seg_logits": ["--batches", "24", "--warmup", "4"],
         "image_loop": ["--batches", "40", "--warmup", "5"], "seg_cpu_argmax": ["--batches", "24", "--warmup", "4"],
         "tokenize_embed": ["--batches", "16", "--warmup", "3"], "embed_16": ["--batches", "16", "--warmup", "0"],
         "embed_16_split2": ["--batches", "16", "--warmup", "0"], "embed_16_split4": ["--batches", "16", "--warmup", "0"]}
# the captures run as the unprofiled runs do (the same batches and warm-up): verify's figure is then comparable
CAPTURE_SIZES = {k: v for k, v in SIZES.items() if not k.startswith("embed_16")}
CAPTURES = ROOT / "out" / "fixes-captures"


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


def program_env() -> dict:
    """The environment of every run of a program, profiled or not: the checkout importable, offline, each batch's
    outputs checked (NSYS_TRANSFER_VERIFY)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "NSYS_TRANSFER_VERIFY": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def run_once(program: str, args: list, python: str, timeout: float) -> dict:
    """One run: its RESULT record, and the pipeline's integrity verdict when it printed one."""
    if program == "workloads":
        return run_workload(args, python, timeout)
    r = subprocess.run([python, str(ROOT / "tests" / "programs" / f"{program}.py"), "--device", "cuda", *args],
                       capture_output=True, text=True, timeout=timeout, env=program_env(), cwd=ROOT)
    lines = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]}
    out = json.loads(lines[-1][7:])
    said = [x for x in r.stderr.splitlines() if "batches arrived" in x or "INTEGRITY" in x]
    out["integrity"] = said[-1].split(": ", 1)[-1] if said else None
    return out


def capture(name: str, variant: str, python: str, timeout: float) -> Path | None:
    """One profiled run of a variant under `nsys-transfer run`'s default capture; the export, or None."""
    prog, args = CASES[name][variant]
    base = CAPTURES / f"{name}_{variant}"
    base.parent.mkdir(parents=True, exist_ok=True)
    # the program the unprofiled runs measured (program_env: its outputs checked too), in a capture light enough to
    # time it: CPU sampling with stacks slowed image_loop_fixed to 0.66 of its unprofiled pace and image_loop to 0.95
    cmd = [python, "-m", "nsys_transfer", "run", "-o", str(base), "--force", "--sample", "none",
           "--python-backtrace", "none", "--", python,
           str(ROOT / "tests" / "programs" / f"{prog}.py"), "--device", "cuda", *args, *CAPTURE_SIZES[name]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=program_env(), cwd=ROOT)
    out = base.with_suffix(".sqlite")
    if r.returncode != 0 or not out.exists():
        print(f"  {name} {variant}: capture failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
        return None
    return out


def verified(name: str, python: str, timeout: float) -> dict:
    """verify's speed-up on a capture of each side, and its verdict line."""
    sides = [capture(name, v, python, timeout) for v in ("before", "after")]
    if None in sides:
        return {"verify_speedup": None, "verify_line": "a capture failed"}
    doc = CAPTURES / f"{name}_verify.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([python, "-m", "nsys_transfer", "verify", *map(str, sides), "--json", str(doc), "-q"],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if not doc.exists():
        return {"verify_speedup": None, "verify_line": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]}
    d = json.loads(doc.read_text())
    change, source = d["verdict"]["change"], d["metrics"][0]["source"]
    return {"verify_speedup": None if change is None else 1 + change, "verify_line": d["verdict"]["line"],
            "verify_source": source}


def measure(name: str, repeat: int, python: str, timeout: float, skip: frozenset = frozenset()) -> dict:
    """Ceiling, before and after, `repeat` times each, interleaved (the machine drifts less between neighbours);
    the variants in `skip` (ceiling, host) left out."""
    variants = {v: (prog, a + SIZES.get(name, [])) for v, (prog, a) in CASES[name].items() if v not in skip}
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
    b, a = row["before_batches_per_s"], row["after_batches_per_s"]
    row["speedup"] = a / b if a and b else None
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


def verify_table(rows: list) -> str:
    """verify's speed-up against the unprofiled one, per program."""
    f = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    out = ["| program | unprofiled speed-up | verify's speed-up | verify / unprofiled | verify said |",
           "| --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        if "verify_speedup" not in r:
            continue
        u, v = r["speedup"], r["verify_speedup"]
        out.append(f"| {r['case']} | {f(u, '.2f')} | {f(v, '.2f')} | {f(v / u if u and v else None, '.2f')} | "
                   f"{r['verify_line']} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default=",".join(CASES))
    p.add_argument("--out", default="out/fixes.json")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--verify", action="store_true", help="also capture before and after, and compare them by verify")
    p.add_argument("--skip", default="", help="variants to leave out, e.g. ceiling,host (the speed-ups only)")
    a = p.parse_args()
    rows = []
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    for n in a.only.split(","):
        rows.append(measure(n, a.repeat, a.python, a.timeout, frozenset(filter(None, a.skip.split(",")))))
        if a.verify and n in CAPTURE_SIZES:
            rows[-1].update(verified(n, a.python, a.timeout))
        Path(a.out).write_text(json.dumps(rows, indent=2))  # what is done so far survives a time-out
        print(f"fixes: {n}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    print(table(rows))
    if a.verify:
        print()
        print(verify_table(rows))


if __name__ == "__main__":
    main()
