#!/usr/bin/env bash
# GPU recordings for issue 58 (torch.profiler traces nobody here recorded), to run on the GPU machine from the checkout:
#
#   bash benchmarks/strangers58_gpu.sh [OUT]          # OUT defaults to $OUT (the device tool's folder) or out/strangers58
#
# 1. The ten programs of tests/programs/strangers58 (written by a helper who had not read the rules; the answer key
#    KEY.md was written before any trace existed), each with its own profiler set-up at its default (GPU) sizes,
#    each into OUT/<program>/ (their own file names: tensorboard_trace_handler's <host>_<pid>.<ns>.pt.trace.json[.gz],
#    export_chrome_trace's .json; rank_text_preproc as rank 0 and rank 1 at once).
# 2. tests/programs/warmup_range.py (item 2: set-up inside a range named `warmup`, no schedule, no step marks) and
#    tests/programs/kineto_loop.py with --cycles 3 (item 6: a schedule's three cycles, one file each).
# 3. analyze-trace on each, its text and JSON beside the traces (OUT/<program>/analysis.{txt,json}), and a table last.
# Each program's stdout/stderr is OUT/<program>.log; a program that fails is said in the table and the rest go on.
# Nothing here needs nsys. Wall time on an H100: about 3-5 minutes (each program 5-10 s, the analyses under a minute).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-out/strangers58}}
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || command -v python3)}
mkdir -p "$OUT"
S=tests/programs/strangers58
export PYTHONPATH=$PWD NSYS_TRANSFER_CACHE=${NSYS_TRANSFER_CACHE:-$OUT/.cache}
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee "$OUT/env.txt"
"$PY" -c "import ijson" 2>/dev/null || echo "note: no ijson here: the analyses below will say so (pip install ijson); the traces are kept" | tee -a "$OUT/env.txt"

run() {  # NAME CMD...: run one program into OUT/NAME, its log beside
  local name=$1; shift
  mkdir -p "$OUT/$name"
  local t0=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then echo "$name ok $((SECONDS - t0))s" >>"$OUT/runs.txt"
  else echo "$name FAILED rc=$? $((SECONDS - t0))s (see $name.log)" >>"$OUT/runs.txt"; fi
}
: >"$OUT/runs.txt"
for p in train_item seg_postproc transformer_sync_timing dataloader_transforms pageable_h2d legacy_event_sync \
         tiny_mlp_serving gemm_bound resnet50_amp; do
  run "$p" "$PY" "$S/$p.py" --device cuda --out "$OUT/$p"
done
# the two ranks at once, as a job runs them (each on the one GPU)
mkdir -p "$OUT/rank_text_preproc"
t0=$SECONDS
"$PY" $S/rank_text_preproc.py --device cuda --rank 0 --world-size 2 --out "$OUT/rank_text_preproc" >"$OUT/rank_text_preproc.rank0.log" 2>&1 &
r0=$!
"$PY" $S/rank_text_preproc.py --device cuda --rank 1 --world-size 2 --out "$OUT/rank_text_preproc" >"$OUT/rank_text_preproc.rank1.log" 2>&1
rc1=$?; wait $r0; rc0=$?
echo "rank_text_preproc rc=$rc0/$rc1 $((SECONDS - t0))s" >>"$OUT/runs.txt"
run warmup_range "$PY" tests/programs/warmup_range.py "$OUT/warmup_range/warmup_range.json" --device cuda
run kineto_cycles "$PY" tests/programs/kineto_loop.py "$OUT/kineto_cycles/tb" --device cuda --tensorboard --cycles 3 \
    --steps 7 --batch 64 --size 128

# the analyses: each folder as analyze-trace reads it (a folder of several traces is a run's cycles or ranks)
printf '%-26s %-8s %s\n' program rc verdict >"$OUT/table.txt"
for d in "$OUT"/*/; do
  name=$(basename "$d"); [ "$name" = .cache ] && continue
  target=$d; [ "$name" = kineto_cycles ] && target=$d/tb
  "$PY" -m nsys_transfer.analysis "$target" --all --json "$d/analysis.json" >"$d/analysis.txt" 2>&1
  rc=$?
  verdict=$(grep -m1 '^verdict' "$d/analysis.txt" | cut -c1-150)
  printf '%-26s %-8s %s\n' "$name" "$rc" "${verdict:-$(tail -1 "$d/analysis.txt" | cut -c1-150)}" >>"$OUT/table.txt"
done
cat "$OUT/runs.txt" "$OUT/table.txt"
