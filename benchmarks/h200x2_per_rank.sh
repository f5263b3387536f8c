#!/usr/bin/env bash
# Several GPUs (issue 6), third run on the 2 x H200 machine: `pinned` traced with one nsys session per rank
# (`make profile STAGE=pinned GPUS=2 PER_RANK=1 STEPS=12`), 12 steps. Writes $OUT/pinned-x2rank.rank<N>.sqlite.xz,
# the run record and per_rank.log.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/runs
N=$(nvidia-smi -L | wc -l)
t=$(date +%s)
timeout 400 python3 -m profiling stage pinned --gpus "$N" --per-rank --steps 12 --warmup 3 --out-dir /tmp/runs --force \
  >/tmp/runs/per_rank.log 2>&1
echo "exit $? in $(( $(date +%s) - t )) s" | tee "$OUT/per_rank.log"
tr '\r' '\n' < /tmp/runs/per_rank.log | grep -E 'steps/s|ranks|warning|profile:|rror|Generated|sqlite' | tail -12 | tee -a "$OUT/per_rank.log"
d=/tmp/runs/pinned-x${N}rank
for f in $d/pinned-x${N}rank.rank*.sqlite; do xz -T0 -6 -c "$f" > "$OUT/$(basename "$f").xz"; done
cp $d/pinned-x${N}rank.run.json "$OUT/" 2>/dev/null
ls -la "$OUT"
