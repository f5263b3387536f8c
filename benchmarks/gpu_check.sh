#!/usr/bin/env bash
# On the GPU machine, with the Nsight Systems that `make nsys` installs (2024.2, carried as .carry/nsys2024.tar.xz
# with an nvtx<0.2.12 wheel): the driver check, the GPU tests, and two stages profiled and diagnosed through the
# toolkit's own commands. Traces come back as $OUT/*.sqlite.xz; a short table last.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/nvtx-*.whl >/dev/null 2>&1
tar xJf .carry/nsys2024.tar.xz -C /tmp && export NSYS=/tmp/nsys/target-linux-x64/nsys
OUT=${OUT:-out}; mkdir -p "$OUT" /tmp/runs
echo "== where"; python3 -m profiling where 2>&1 | tail -3
echo "== GPU tests"; timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -4
for spec in "baseline 3" "pinned 12"; do
  set -- $spec
  echo "== profile $1 ($2 steps)"
  timeout 150 python3 -m profiling profile "$1" --steps "$2" --warmup 3 --out-dir /tmp/runs --force > /tmp/runs/$1.log 2>&1
  echo "exit $?"; grep -E "warning|error" /tmp/runs/$1.log | head -5
  f=/tmp/runs/$1/$1.sqlite
  [ -f "$f" ] && python3 -m analysis "$f" --check | tail -3 && python3 -m analysis "$f" | grep -E "^GPU busy|^steps|^  \[(high|medium)\]" | cut -c1-220
  [ -f "$f" ] && python3 -m analysis.scrub "$f" "$OUT/$1-nsys2024.sqlite.xz" >/dev/null 2>&1
done
ls -la "$OUT"
