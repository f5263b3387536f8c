#!/usr/bin/env bash
# Several GPUs (issue 6), second run on the 2 x H200 machine: the GPU tests (torchrun with world size 1 and 2, the
# link probe, a 2-rank capture analysed per GPU), then unprofiled `pinned`: one process, torchrun with one rank,
# torchrun with every GPU and the default worker counts (8 loader + 8 output workers per GPU).
# Writes $OUT/check.json and $OUT/check.log.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/c
LOG="$OUT/check.log"
N=$(nvidia-smi -L | wc -l)
{ nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c; echo "gpus $N; cpus $(nproc)"; } | tee "$LOG"
echo "== GPU tests" | tee -a "$LOG"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -6 | tee -a "$LOG"
A="--stage pinned --steps 20 --warmup 3"
echo "== unprofiled pinned, 20 steps" | tee -a "$LOG"
timeout 90 python3 -m workloads $A --json /tmp/c/one.json 2>&1 | tail -1 | sed 's/^/process: /' | tee -a "$LOG"
timeout 100 python3 -m torch.distributed.run --nproc-per-node 1 -m workloads $A --json /tmp/c/rank1.json 2>&1 | tail -1 | sed 's/^/torchrun x1: /' | tee -a "$LOG"
timeout 120 python3 -m torch.distributed.run --nproc-per-node "$N" -m workloads $A --json /tmp/c/all.json 2>&1 | tail -2 | sed "s/^/torchrun x$N: /" | tee -a "$LOG"
python3 - "$OUT" <<'PY' | tee -a "$LOG"
import json, os, sys
rec = {k: json.load(open(f"/tmp/c/{k}.json")) for k in ("one", "rank1", "all") if os.path.exists(f"/tmp/c/{k}.json")}
json.dump(rec, open(sys.argv[1] + "/check.json", "w"), indent=2)
one = rec["one"]["throughput"]["steps_per_s"]
for k, r in rec.items():
    t = r["throughput"]
    n = t.get("world_size", 1)
    print(f"{k}: {t['steps_per_s']:.3f} steps/s over {n} GPU(s) = {t['steps_per_s'] / (n * one):.2f} x N x single; "
          f"workers per rank {[x['config']['output_workers'] for x in r.get('ranks', [r])]}; integrity {r['integrity']['ok']}")
PY
