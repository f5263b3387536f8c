#!/usr/bin/env bash
# Several GPUs (issue 6): the 8-core 2-GPU `pinned` run traced past its buffer pool (30 steps, pool of 10 per rank),
# so the steady state shows: the GPUs wait for free buffers while the shared cores are saturated.
# Writes $OUT/pinned-cpu8long-x2gpu.{sqlite.xz,run.json,workload.json} and cpu8long.log.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/runs
N=$(nvidia-smi -L | wc -l)
t=$(date +%s)
timeout 400 taskset -c 0-7 python3 -m profiling stage pinned --gpus "$N" --steps 30 --warmup 3 --out-dir /tmp/runs \
  --force >/tmp/runs/p8.log 2>&1
echo "traced 8-core run, 30 steps: exit $? in $(( $(date +%s) - t )) s" | tee "$OUT/cpu8long.log"
tr '\r' '\n' < /tmp/runs/p8.log | grep -E 'steps/s|rror|warning' | tail -3 | tee -a "$OUT/cpu8long.log"
f=/tmp/runs/pinned-x${N}gpu/pinned-x${N}gpu
xz -T0 -6 -c $f.sqlite > "$OUT/pinned-cpu8long-x${N}gpu.sqlite.xz"; ls -la "$OUT"
cp $f.run.json "$OUT/pinned-cpu8long-x${N}gpu.run.json"; cp $f.workload.json "$OUT/pinned-cpu8long-x${N}gpu.workload.json"
python3 -m analysis "$f.sqlite" 2>&1 | tail -8 | tee -a "$OUT/cpu8long.log"
