#!/usr/bin/env bash
# Capture every stage under nsys on the GPU machine (3 steps, article configuration) and pack the
# SQLite exports (xz) into $OUT/traces.tar; also the unsafe-handoff integrity demo on `pinned`.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/runs
start=$(date +%s); budget=${BUDGET_S:-570}
left() { echo $(( budget - ($(date +%s) - start) )); }
echo "== unsafe hand-off on pinned (must FAIL integrity)"
timeout 90 python3 -m workloads --stage pinned --unsafe --steps 10 --warmup 2 --json /tmp/runs/unsafe.json 2>&1 | tail -1
echo "exit ${PIPESTATUS[0]}"
p() { # p NAME STAGE STEPS [ARGS]
  local name=$1 stage=$2 steps=$3; shift 3
  if [ "$(left)" -lt 70 ]; then echo "skip $name: out of time"; return; fi
  local t=$(date +%s)
  timeout $(( $(left) - 10 )) python3 -m profiling stage "$stage" --steps "$steps" --warmup 3 --out-dir /tmp/runs/$name --force "$@" >/tmp/runs/$name.log 2>&1
  echo "$name: exit $? in $(( $(date +%s) - t )) s; $(ls -la /tmp/runs/$name/$stage/$stage.sqlite 2>/dev/null | awk '{print $5}') bytes; $(tr '\r' '\n' < /tmp/runs/$name.log | grep -E 'steps/s|warning|profile:' | tail -2 | tr '\n' ' ')"
  [ -f /tmp/runs/$name/$stage/$stage.sqlite ] && xz -T0 -6 -c /tmp/runs/$name/$stage/$stage.sqlite > /tmp/runs/$name.sqlite.xz \
    && cp /tmp/runs/$name/$stage/$stage.run.json /tmp/runs/$name.run.json
}
p baseline baseline 3
p streams streams 3
p pinned pinned 3
p async async 3
p bufpool bufpool 3
p multiproc multiproc 3
p naive-input naive-input 3
p ceiling ceiling 3
p pinned-long pinned 12
(cd /tmp/runs && tar cf "$OUT/traces.tar" *.sqlite.xz *.run.json unsafe.json *.log 2>/dev/null)
ls -la /tmp/runs/*.xz; echo "total $(( $(date +%s) - start )) s"
