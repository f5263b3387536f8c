#!/usr/bin/env bash
# Several GPUs (issue 6): `pinned` on both GPUs confined to 8 cores (taskset -c 0-7), traced in one nsys session
# (12 steps) with the workload's own record beside the trace (host CPU load, throughput with the drain).
# Writes $OUT/pinned-cpu8-x2gpu.{sqlite.xz,run.json,workload.json} and cpu8.log.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/runs
N=$(nvidia-smi -L | wc -l)
t=$(date +%s)
timeout 300 taskset -c 0-7 python3 -m profiling stage pinned --gpus "$N" --steps 12 --warmup 3 --out-dir /tmp/runs \
  --force >/tmp/runs/p8.log 2>&1
echo "traced 8-core run: exit $? in $(( $(date +%s) - t )) s" | tee "$OUT/cpu8.log"
tr '\r' '\n' < /tmp/runs/p8.log | grep -E 'steps/s|rror|warning' | tail -3 | tee -a "$OUT/cpu8.log"
f=/tmp/runs/pinned-x${N}gpu/pinned-x${N}gpu
xz -T0 -6 -c $f.sqlite > "$OUT/pinned-cpu8-x${N}gpu.sqlite.xz"
cp $f.run.json "$OUT/pinned-cpu8-x${N}gpu.run.json"; cp $f.workload.json "$OUT/pinned-cpu8-x${N}gpu.workload.json"
python3 -m analysis "$f.sqlite" 2>&1 | tail -9 | tee -a "$OUT/cpu8.log"
