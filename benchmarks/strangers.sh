#!/usr/bin/env bash
# Programs nobody on the project wrote (tests/programs/strangers), on a GPU machine: each one traced whole with
# `nsys-transfer run`'s defaults (CPU samples, Python backtraces, the Python stack sampler), scrubbed, with its
# stacks, run record, console and analyze-trace text; optionally timed unprofiled, plain and with the stack sampler
# alone (its cost). One tarball a program in OUT (the device tool brings back 8 files of 16 MiB); scrub there.
#
#   bash benchmarks/strangers.sh capture|time [PROGRAM ...]     (default: every program in tests/programs/strangers)
#   bash benchmarks/strangers.sh pair ORIGINAL:FIXED ...         (issue 48: both timed unprofiled, alternately, REPEAT
#        times, then both captured the way the README asks for verify (RUN_OPTS), and verify's text kept beside)
# Environment: NSYS_BUNDLE (a tarball of Nsight Systems, unpacked to /tmp), PYTHON (python3), OUT (out/strangers),
#   ARGS_<program> (its arguments, e.g. ARGS_det_nms="--batches 20"; a fixed program without its own takes its
#   original's), T_PROGRAM (seconds, 150), REPEAT (time, pair: 2), RUN_OPTS (nsys-transfer run's options for capture)
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
args_of() { local v="ARGS_$1" o="ARGS_${2:-}"; echo "${!v:-${!o:-}}"; }

capture() {
  local p=$1 t0 rc
  t0=$(date +%s)
  # shellcheck disable=SC2046,SC2086
  timeout "${T_PROGRAM:-150}" $PY -m nsys_transfer run -o "$RUNS/$p" --force ${RUN_OPTS:-} -- $PY \
    tests/programs/strangers/$p.py $(args_of "$p" "${2:-}") > "$OUT/text/$p.console" 2>&1
  rc=$?
  if [ -f "$RUNS/$p.sqlite" ]; then  # compressed here, scrubbed where it is read (scrub-trace), one tarball each
    if command -v xz >/dev/null; then xz -T0 -3 -c "$RUNS/$p.sqlite" > "$RUNS/${p}_nsys2024.sqlite.xz"
    else $PY -c "import sys,lzma,shutil; shutil.copyfileobj(open(sys.argv[1],'rb'), lzma.open(sys.argv[2],'wb',preset=3))" \
           "$RUNS/$p.sqlite" "$RUNS/${p}_nsys2024.sqlite.xz"; fi
    for ext in pystacks.gz run.json; do [ -f "$RUNS/$p.$ext" ] && cp "$RUNS/$p.$ext" "$RUNS/${p}_nsys2024.$ext"; done
    cp "$OUT/text/$p.console" "$RUNS/${p}_nsys2024.console"
    tar cf "$OUT/$p.tar" -C "$RUNS" $(cd "$RUNS" && ls "${p}"_nsys2024.*)
  fi
  echo "$p capture rc=$rc $(( $(date +%s) - t0 ))s $(grep -h '^RESULT' "$OUT/text/$p.console" | tail -1 | cut -c1-160)" |
    tee -a "$summary"
}

timed() {
  local p=$1 mode=$2 env=() r
  [ "$mode" = sampler ] && { mkdir -p /tmp/st-$p; env=(NSYS_TRANSFER_PYSTACKS=/tmp/st-$p PYTHONPATH=$PWD/profiling/stack-sampler:$PYTHONPATH); }
  # shellcheck disable=SC2046
  r=$(env "${env[@]}" timeout "${T_PROGRAM:-150}" $PY tests/programs/strangers/$p.py $(args_of "$p" "${3:-}") 2>/dev/null | grep '^RESULT' | tail -1)
  echo "$p $mode ${r#RESULT }" | tee -a "$summary"
  rm -rf /tmp/st-$p
}

pair() {  # ORIGINAL:FIXED
  local a=${1%%:*} b=${1##*:}
  for _ in $(seq "${REPEAT:-2}"); do timed "$a" plain; timed "$b" plain "$a"; done
  capture "$a"; capture "$b" "$a"
  [ -f "$RUNS/$a.sqlite" ] && [ -f "$RUNS/$b.sqlite" ] &&
    $PY -m nsys_transfer verify "$RUNS/$a.sqlite" "$RUNS/$b.sqlite" > "$OUT/text/$a.verify" 2>&1
  echo "$a -> $b verify: $(head -1 "$OUT/text/$a.verify" 2>/dev/null | cut -c1-200)" | tee -a "$summary"
}

for p in "${progs[@]}"; do
  case $what in
    pair) pair "$p" ;;
    capture) capture "$p" ;;
    time) for _ in $(seq "${REPEAT:-2}"); do timed "$p" plain; timed "$p" sampler; done ;;
    *) echo "strangers.sh: capture, time or pair" >&2; exit 2 ;;
  esac
done
cat "$summary"
