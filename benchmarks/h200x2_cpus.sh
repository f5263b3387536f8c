#!/usr/bin/env bash
# Several GPUs (issue 6): are the host's CPU cores a shared limit? `pinned` unprofiled (20 steps) on 1 and 2 GPUs,
# with all 32 cores and confined to 8 (taskset -c 0-7); the workload records how busy its allowed CPUs were. Then
# the 8-core 2-GPU run traced (12 steps). Writes $OUT/scaling.json, cpus.log, pinned-x2cpu8.sqlite.xz + run record.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/s /tmp/runs
LOG="$OUT/cpus.log"
N=$(nvidia-smi -L | wc -l)
echo "gpus $N; cpus $(nproc)" | tee "$LOG"
A="--stage pinned --steps 20 --warmup 3"
run() { # run NAME [taskset...] -- launcher...
  local name=$1; shift
  timeout 150 "$@" -m workloads $A --json /tmp/s/$name.json 2>&1 | tail -1 | sed "s/^/$name: /" | tee -a "$LOG"
}
run one python3
run all python3 -m torch.distributed.run --nproc-per-node "$N"
run one8 taskset -c 0-7 python3
run all8 taskset -c 0-7 python3 -m torch.distributed.run --nproc-per-node "$N"
t=$(date +%s)
timeout 200 taskset -c 0-7 python3 -m profiling stage pinned --gpus "$N" --steps 12 --warmup 3 --out-dir /tmp/runs \
  --force >/tmp/runs/p8.log 2>&1
echo "traced 8-core run: exit $? in $(( $(date +%s) - t )) s" | tee -a "$LOG"
tr '\r' '\n' < /tmp/runs/p8.log | grep -E 'steps/s|rror|warning' | tail -3 | tee -a "$LOG"
f=/tmp/runs/pinned-x${N}gpu/pinned-x${N}gpu
[ -f $f.sqlite ] && xz -T0 -6 -c $f.sqlite > "$OUT/pinned-x${N}cpu8.sqlite.xz" && cp $f.run.json "$OUT/pinned-x${N}cpu8.run.json"
python3 - "$OUT" <<'PY' | tee -a "$LOG"
import json, os, sys
r = {k: json.load(open(f"/tmp/s/{k}.json")) for k in ("one", "all", "one8", "all8") if os.path.exists(f"/tmp/s/{k}.json")}
sc = [{"label": "all 32 cores", "one": r.get("one"), "all": r.get("all")},
      {"label": "8 cores (taskset -c 0-7)", "one": r.get("one8"), "all": r.get("all8")}]
json.dump({"scenarios": sc}, open(sys.argv[1] + "/scaling.json", "w"), indent=2)
for s in sc:
    if s["one"] and s["all"]:
        one, tot = s["one"]["throughput"]["steps_per_s"], s["all"]["throughput"]
        print(f"{s['label']}: 1 GPU {one:.3f}, {tot['world_size']} GPUs {tot['steps_per_s']:.3f} = "
              f"{tot['steps_per_s'] / (tot['world_size'] * one):.2f} x N x single; host CPU {s['one']['host_cpu']} / {s['all']['host_cpu']}")
PY
