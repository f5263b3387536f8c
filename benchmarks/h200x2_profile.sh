#!/usr/bin/env bash
# Several GPUs (issue 6), on the 2 x H200 machine, one run: the `pinned` stage traced on every GPU under torchrun
# (12 steps, one multi-process trace), the link probe (DtoH alone and all GPUs at once, traced and unprofiled),
# the GPU tests (torchrun with world size 1 and N), and the article's `streams` stage traced on every GPU.
# Writes into $OUT: *.sqlite.xz, *.run.json, probe.json, x2.log.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/runs
LOG="$OUT/x2.log"
start=$(date +%s); budget=${BUDGET_S:-560}
left() { echo $(( budget - ($(date +%s) - start) )); }
N=$(nvidia-smi -L | wc -l)
{ nvidia-smi --query-gpu=name,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -4; echo "gpus $N; cpus $(nproc)"; } | tee "$LOG"
p() { # p NAME STAGE STEPS [ARGS]: trace STAGE on every GPU
  local name=$1 stage=$2 steps=$3; shift 3
  if [ "$(left)" -lt 90 ]; then echo "skip $name: out of time" | tee -a "$LOG"; return; fi
  local t=$(date +%s)
  timeout $(( $(left) - 20 )) python3 -m profiling stage "$stage" --gpus "$N" --steps "$steps" --warmup 3 \
    --out-dir /tmp/runs/$name --force "$@" >/tmp/runs/$name.log 2>&1
  local rc=$? f=/tmp/runs/$name/$stage-x${N}gpu/$stage-x${N}gpu
  echo "$name: exit $rc in $(( $(date +%s) - t )) s; $(stat -c %s $f.sqlite 2>/dev/null) bytes" | tee -a "$LOG"
  tr '\r' '\n' < /tmp/runs/$name.log | grep -E 'steps/s|ranks|warning|profile:|rror' | tail -4 | tee -a "$LOG"
  [ -f $f.sqlite ] && xz -T0 -6 -c $f.sqlite > "$OUT/$name.sqlite.xz" && cp $f.run.json "$OUT/$name.run.json"
}
p pinned-x2 pinned 12
echo "== link probe, traced" | tee -a "$LOG"
timeout 120 python3 -m profiling run -o /tmp/runs/linkprobe --force --trace=cuda,nvtx,osrt -- \
  python3 -m workloads.linkprobe --repeat 4 --profile --json /tmp/runs/probe-traced.json 2>&1 | tail -12 | tee -a "$LOG"
[ -f /tmp/runs/linkprobe.sqlite ] && xz -T0 -6 -c /tmp/runs/linkprobe.sqlite > "$OUT/linkprobe.sqlite.xz"
echo "== link probe, unprofiled" | tee -a "$LOG"
timeout 100 python3 -m workloads.linkprobe --repeat 8 --json "$OUT/probe.json" 2>&1 | tail -12 | tee -a "$LOG"
echo "== GPU tests" | tee -a "$LOG"
timeout $(( $(left) - 100 )) python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "not capture" 2>&1 | tail -8 | tee -a "$LOG"
p streams-x2 streams 6
echo "total $(( $(date +%s) - start )) s" | tee -a "$LOG"
