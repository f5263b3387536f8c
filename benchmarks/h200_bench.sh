#!/usr/bin/env bash
# Unprofiled throughput of every stage, one run on the GPU machine: the article configuration (DeepLabV3-ResNet50,
# batch 64, 512x512, 21 classes, 8 loader + 8 output workers), ablations, the encoder, and the unsafe-handoff demo.
# Run from the repo root there with .carry/ (nvtx wheel) carried; writes $OUT/bench.json and $OUT/bench.log.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/nvtx-*.whl >/dev/null 2>&1
OUT=${OUT:-out}; mkdir -p "$OUT" /tmp/bench
start=$(date +%s); budget=${BUDGET_S:-570}
left() { echo $(( budget - ($(date +%s) - start) )); }
{
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.max,pcie.link.width.max,driver_version --format=csv,noheader
echo "cpus $(nproc); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}'); /dev/shm $(df -h /dev/shm | awk 'NR==2 {print $2}')"
} | tee "$OUT/bench.log"
b() { # b NAME STAGES LABEL ARGS...
  local name=$1 stages=$2 label=$3; shift 3
  if [ "$(left)" -lt 30 ]; then echo "skip $name: out of time" | tee -a "$OUT/bench.log"; return; fi
  python3 -m profiling bench --stages "$stages" --out "/tmp/bench/$name.json" --timeout "$(left)" --label "$label" "$@" \
    2>&1 >/dev/null | tee -a "$OUT/bench.log"
}
b main ceiling,pinned,streams,async,bufpool "" --steps 30 --warmup 5
b slow baseline,multiproc,naive-input "" --steps 10 --warmup 2
b whole pinned pinned-whole-tobytes --steps 20 --warmup 3 --chunk-mb 0
b unsafe pinned pinned-unsafe --steps 10 --warmup 2 --unsafe
b enc ceiling,pinned,streams,bufpool,baseline "" --model encoder --batch 256 --steps 20 --warmup 3
python3 - "$OUT" <<'PY' | tee -a "$OUT/bench.log"
import json, glob, sys
sys.path.insert(0, ".")
from profiling.bench import table
recs = []
for name in ["main", "slow", "whole", "unsafe", "enc"]:
    for f in glob.glob(f"/tmp/bench/{name}.json"):
        for r in json.load(open(f))["records"]:
            if name == "enc":
                r["label"] = "encoder-" + r["stage"]
            recs.append(r)
json.dump({"records": recs}, open(sys.argv[1] + "/bench.json", "w"), indent=2)
print(table(recs))
PY
echo "total $(( $(date +%s) - start )) s" | tee -a "$OUT/bench.log"
