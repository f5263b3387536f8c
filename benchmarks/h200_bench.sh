#!/usr/bin/env bash
# Unprofiled throughput of every stage on the GPU machine (article configuration unless noted).
# Run from the repo root on the device machine with .carry/ (nvtx wheel, nsys bundle) carried; writes $OUT/*.json.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/nvtx-*.whl >/dev/null 2>&1
OUT=${OUT:-out}; mkdir -p "$OUT"
start=$(date +%s); budget=${BUDGET_S:-560}
left() { echo $(( budget - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.max,pcie.link.width.max,driver_version --format=csv,noheader
echo "cpus $(nproc); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}'); /dev/shm $(df -h /dev/shm | awk 'NR==2 {print $2}')"
python3 -c "import torch, torchvision, nvtx; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'nvtx', nvtx.__version__ if hasattr(nvtx,'__version__') else '?')"
b() { # b OUTNAME STAGES [LABEL] -- ARGS
  local name=$1 stages=$2 label=$3; shift 3
  if [ "$(left)" -lt 40 ]; then echo "skip $name: out of time"; return; fi
  python3 -m profiling bench --stages "$stages" --out "$OUT/$name.json" --timeout "$(left)" --label "$label" "$@" >/dev/null
}
b fast ceiling,pinned,streams,async,bufpool "" --steps 30 --warmup 5
b unsafe streams streams-unsafe --steps 10 --warmup 2 --unsafe
b pinned12 pinned pinned-12w --steps 30 --warmup 5 --output-workers 12
b pinnedwhole pinned pinned-whole-tobytes --steps 20 --warmup 3 --chunk-mb 0
b slow baseline,multiproc,naive-input "" --steps 10 --warmup 2
b enc ceiling,pinned,streams,baseline enc --model encoder --batch 256 --steps 20 --warmup 3
python3 - "$OUT" <<'PY'
import json, glob, sys
sys.path.insert(0, ".")
from profiling.bench import table
recs = []
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    recs += json.load(open(f))["records"]
print(table(recs))
PY
echo "total $(( $(date +%s) - start )) s"
