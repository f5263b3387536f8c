#!/usr/bin/env bash
# Several GPUs (issue 6): `pinned` on both GPUs confined to 8 cores (taskset -c 0-7), traced in one nsys session with
# the workload's own record beside the trace (host CPU load, throughput with the drain).
#   bash benchmarks/h200x2_cpu8_trace.sh            12 steps -> $OUT/pinned-cpu8-x2gpu.{sqlite.xz,run.json,workload.json}, cpu8.log
#   bash benchmarks/h200x2_cpu8_trace.sh 30 cpu8long   past the buffer pool (10 per rank) -> pinned-cpu8long-x2gpu.*, cpu8long.log
set -u
STEPS=${1:-12} TAG=${2:-cpu8}
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/runs
N=$(nvidia-smi -L | wc -l)
t=$(date +%s)
timeout $(( 240 + 5 * STEPS )) taskset -c 0-7 python3 -m profiling stage pinned --gpus "$N" --steps "$STEPS" --warmup 3 \
  --out-dir /tmp/runs --force >/tmp/runs/p8.log 2>&1
echo "traced 8-core run, $STEPS steps: exit $? in $(( $(date +%s) - t )) s" | tee "$OUT/$TAG.log"
tr '\r' '\n' < /tmp/runs/p8.log | grep -E 'steps/s|rror|warning' | tail -3 | tee -a "$OUT/$TAG.log"
f=/tmp/runs/pinned-x${N}gpu/pinned-x${N}gpu
name=pinned-$TAG-x${N}gpu
xz -T0 -6 -c $f.sqlite > "$OUT/$name.sqlite.xz"
cp $f.run.json "$OUT/$name.run.json"; cp $f.workload.json "$OUT/$name.workload.json"
python3 -m analysis "$f.sqlite" 2>&1 | tail -9 | tee -a "$OUT/$TAG.log"
