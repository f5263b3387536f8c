#!/usr/bin/env bash
# The `pinned` stage after splitting each batch across the output workers: unprofiled against the compute ceiling
# in one run (30 measured steps, article configuration), the split=1 ablation, and fresh 3- and 12-step captures.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/b /tmp/runs
python3 -m profiling bench --stages ceiling,pinned --out /tmp/b/main.json --timeout 120 --steps 30 --warmup 5 2>&1 >/dev/null | tee "$OUT/pinned.log"
python3 -m profiling bench --stages pinned --label pinned-split1 --out /tmp/b/split1.json --timeout 100 --steps 30 --warmup 5 --split 1 2>&1 >/dev/null | tee -a "$OUT/pinned.log"
for spec in "pinned 3" "pinned-long 12"; do set -- $spec
  timeout 100 python3 -m profiling stage pinned --steps $2 --warmup 3 --out-dir /tmp/runs/$1 --force >/tmp/runs/$1.log 2>&1
  echo "$1: exit $?" | tee -a "$OUT/pinned.log"
  xz -T0 -6 -c /tmp/runs/$1/pinned/pinned.sqlite > "$OUT/$1.sqlite.xz" && cp /tmp/runs/$1/pinned/pinned.run.json "$OUT/$1.run.json"
done
python3 - "$OUT" <<'PY' | tee -a "$OUT/pinned.log"
import json, sys
sys.path.insert(0, ".")
from profiling.bench import table
recs = json.load(open("/tmp/b/main.json"))["records"] + json.load(open("/tmp/b/split1.json"))["records"]
json.dump({"records": recs}, open(sys.argv[1] + "/bench_pinned.json", "w"), indent=2)
print(table(recs))
PY
