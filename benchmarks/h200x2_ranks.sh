#!/usr/bin/env bash
# Several GPUs (issue 6): the final `pinned` stage on one GPU and under torchrun on both GPUs of the machine, one run.
# Same per-GPU resources in both: 8 loader + 8 output workers per GPU. Writes $OUT/ranks.json and $OUT/ranks.log.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/nvtx-*.whl >/dev/null 2>&1
OUT=${OUT:-out}; mkdir -p "$OUT" /tmp/r
N=$(nvidia-smi -L | wc -l)
{ nvidia-smi --query-gpu=name,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader; echo "gpus $N; cpus $(nproc); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}')"; } | tee "$OUT/ranks.log"
A="--steps 20 --warmup 3"
timeout 100 python3 -m workloads --stage pinned $A --json /tmp/r/one.json 2>&1 | tail -1 | tee -a "$OUT/ranks.log"
timeout 150 python3 -m torch.distributed.run --nproc-per-node "$N" -m workloads --stage pinned $A \
  --loader-workers $((8 * N)) --output-workers $((8 * N)) --json /tmp/r/all.json 2>&1 | tail -2 | tee -a "$OUT/ranks.log"
timeout 80 python3 -m workloads --stage ceiling $A --json /tmp/r/ceil.json 2>&1 | tail -1 | tee -a "$OUT/ranks.log"
python3 - "$OUT" "$N" <<'PY' | tee -a "$OUT/ranks.log"
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
rec = {k: json.load(open(f"/tmp/r/{k}.json")) for k in ("one", "all", "ceil") if __import__("os").path.exists(f"/tmp/r/{k}.json")}
json.dump(rec, open(out + "/ranks.json", "w"), indent=2)
one = rec["one"]["throughput"]["steps_per_s"]; tot = rec["all"]["throughput"]["steps_per_s"]
print(f"one GPU {one:.3f} steps/s; {n} GPUs {tot:.3f} steps/s total = {tot / (n * one):.2f} x N x single "
      f"(goal >= 0.9); per rank {rec['all']['throughput']['per_rank_steps_per_s']}; integrity {rec['all']['integrity']['ok']}")
PY
