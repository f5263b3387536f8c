#!/usr/bin/env bash
# Programs nobody on the project wrote (tests/programs/strangers), on a GPU machine: each one traced whole with
# `nsys-transfer run`'s defaults (CPU samples, Python backtraces, the Python stack sampler), scrubbed, with its
# stacks, run record, console and analyze-trace text; optionally timed unprofiled, plain and with the stack sampler
# alone (its cost). One tarball per ~15 MB of traces in OUT (the device tool brings back 8 files of 16 MiB).
#
#   bash benchmarks/strangers.sh capture|time [PROGRAM ...]     (default: every program in tests/programs/strangers)
# Environment: NSYS_BUNDLE (a tarball of Nsight Systems, unpacked to /tmp), PYTHON (python3), OUT (out/strangers),
#   ARGS_<program> (its arguments, e.g. ARGS_det_nms="--batches 20"), T_PROGRAM (seconds, 150), REPEAT (time: 2)
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
what=${1:-capture}; shift || true
PY=${PYTHON:-python3}
OUT=${OUT:-out/strangers}; RUNS=${RUNS:-/tmp/strangers-runs}
mkdir -p "$OUT" "$RUNS" "$OUT/text"
if [ -n "${NSYS_BUNDLE:-}" ]; then
  mkdir -p /tmp/nsysb && tar xJf "$NSYS_BUNDLE" -C /tmp/nsysb && NSYS=$(find /tmp/nsysb -path '*target-linux-x64/nsys' | head -1)
  export NSYS
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
progs=("$@")
[ ${#progs[@]} -gt 0 ] || mapfile -t progs < <(ls tests/programs/strangers/*.py | xargs -n1 basename | sed 's/\.py$//')
summary=$OUT/summary.txt; : > "$summary"
args_of() { local v="ARGS_$1"; echo "${!v:-}"; }

capture() {
  local p=$1 t0 rc
  t0=$(date +%s)
  # shellcheck disable=SC2046
  timeout "${T_PROGRAM:-150}" $PY -m nsys_transfer run -o "$RUNS/$p" --force -- $PY tests/programs/strangers/$p.py \
    $(args_of "$p") > "$OUT/text/$p.console" 2>&1
  rc=$?
  if [ -f "$RUNS/$p.sqlite" ]; then
    $PY -m nsys_transfer.analysis.cli.scrub "$RUNS/$p.sqlite" "$RUNS/${p}_nsys2024.sqlite.xz" >/dev/null 2>&1 ||
      $PY -c "import sys,lzma,shutil; shutil.copyfileobj(open(sys.argv[1],'rb'), lzma.open(sys.argv[2],'wb',preset=6))" \
        "$RUNS/$p.sqlite" "$RUNS/${p}_nsys2024.sqlite.xz"
    [ -f "$RUNS/$p.pystacks.gz" ] && cp "$RUNS/$p.pystacks.gz" "$RUNS/${p}_nsys2024.pystacks.gz"
    [ -f "$RUNS/$p.run.json" ] && cp "$RUNS/$p.run.json" "$RUNS/${p}_nsys2024.run.json"
  fi
  echo "$p capture rc=$rc $(( $(date +%s) - t0 ))s $(grep -h '^RESULT' "$OUT/text/$p.console" | tail -1 | cut -c1-160)" |
    tee -a "$summary"
}

timed() {
  local p=$1 mode=$2 env=() r
  [ "$mode" = sampler ] && { mkdir -p /tmp/st-$p; env=(NSYS_TRANSFER_PYSTACKS=/tmp/st-$p PYTHONPATH=$PWD/profiling/stack_sampler:$PYTHONPATH); }
  # shellcheck disable=SC2046
  r=$(env "${env[@]}" timeout "${T_PROGRAM:-150}" $PY tests/programs/strangers/$p.py $(args_of "$p") 2>/dev/null | grep '^RESULT' | tail -1)
  echo "$p $mode ${r#RESULT }" | tee -a "$summary"
  rm -rf /tmp/st-$p
}

for p in "${progs[@]}"; do
  case $what in
    capture) capture "$p" ;;
    time) for _ in $(seq "${REPEAT:-2}"); do timed "$p" plain; timed "$p" sampler; done ;;
    *) echo "strangers.sh: capture or time" >&2; exit 2 ;;
  esac
done
if [ "$what" = capture ]; then  # traces, stacks and records into tarballs of at most ~15 MB each
  n=0; size=0; list=()
  for f in $(ls -S "$RUNS"/*_nsys2024.* 2>/dev/null); do
    s=$(stat -c %s "$f")
    if [ $((size + s)) -gt 15000000 ] && [ ${#list[@]} -gt 0 ]; then
      tar cf "$OUT/traces$n.tar" -C "$RUNS" "${list[@]}"; n=$((n + 1)); size=0; list=()
    fi
    list+=("$(basename "$f")"); size=$((size + s))
  done
  [ ${#list[@]} -gt 0 ] && tar cf "$OUT/traces$n.tar" -C "$RUNS" "${list[@]}"
  tar czf "$OUT/text.tgz" -C "$OUT" text
fi
cat "$summary"
