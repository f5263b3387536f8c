#!/usr/bin/env bash
# Several GPUs (issue 6), with the toolkit's own commands on the 2 x H200 machine: the GPU tests, then
# `make scaling STAGE=pinned GPUS=2` with all cores and with CPUS=0-7 (python -m profiling scaling, 20 steps).
# Writes $OUT/scaling.json and scaling.log.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT"
LOG="$OUT/scaling.log"
N=$(nvidia-smi -L | wc -l)
echo "gpus $N; cpus $(nproc)" | tee "$LOG"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -3 | tee -a "$LOG"
for c in "" "0-7"; do
  timeout 200 python3 -m profiling scaling --stage pinned --gpus "$N" ${c:+--cpus $c} --out "$OUT/scaling.json" \
    --steps 20 --warmup 3 2>&1 | tail -3 | tee -a "$LOG"
done
