#!/usr/bin/env bash
# A spawned-worker pair on a GPU machine (issue 48): seg_numpy_post against seg_numpy_post_mpfix (a torch.multiprocessing
# spawn pool), each timed unprofiled alternately at 10 batches, profiled several ways (how much each part of the
# profiling lengthens the workers' start), at 40 and 120 batches (the steady state verify's "in a longer run" predicts),
# then captured as the README asks for verify, and verify's verdict. One summary line a run in OUT/summary.txt.
#
#   NSYS_BUNDLE=.carry/nsys2024.tar.xz bash benchmarks/spawned_start.sh [short|variants|long|verify ...]  (default: all)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
PY=${PYTHON:-python3}; OUT=${OUT:-out/spawned}; W=${RUNS:-/tmp/spawned-runs}; mkdir -p "$OUT" "$W"
if [ -n "${NSYS_BUNDLE:-}" ]; then
  mkdir -p /tmp/nsysb && tar xJf "$NSYS_BUNDLE" -C /tmp/nsysb && NSYS=$(find /tmp/nsysb -path '*target-linux-x64/nsys' | head -1)
  export NSYS
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
S=$OUT/summary.txt; A="--batches 10 --warmup 2"; B=seg_numpy_post; F=seg_numpy_post_mpfix
res() { grep -h '^RESULT' "$1" | tail -1 | $PY -c 'import sys,json; d=json.loads(sys.stdin.read()[7:]); print(d["wall_s"], round(d["steady_batches_per_s"],3))' 2>/dev/null || echo "failed"; }
plain() { timeout 150 $PY tests/programs/strangers/$1.py $2 > "$W/o.txt" 2>&1; echo "$1 plain $2: $(res "$W/o.txt")" | tee -a "$S"; }
sampler() { rm -rf "$W/st"; mkdir -p "$W/st"
  timeout 150 env NSYS_TRANSFER_PYSTACKS="$W/st" PYTHONPATH="$PWD/profiling/stack-sampler:$PYTHONPATH" $PY tests/programs/strangers/$1.py $A > "$W/o.txt" 2>&1
  echo "$1 sampler alone $A: $(res "$W/o.txt")" | tee -a "$S"; }
nsys_only() { local p=$1 v=$2; shift 2
  timeout 150 "${NSYS:-nsys}" profile --sample=none --cpuctxsw=none --force-overwrite=true -o "$W/${p}_$v" "$@" $PY tests/programs/strangers/$p.py $A > "$W/o.txt" 2>&1
  echo "$p nsys $v $A: $(res "$W/o.txt")" | tee -a "$S"; }
readme() { timeout 150 $PY -m nsys_transfer run -o "$W/$1" --force --sample none --python-backtrace none -- $PY tests/programs/strangers/$1.py $A > "$W/$1.console" 2>&1
  echo "$1 captured as the README asks $A: $(res "$W/$1.console")" | tee -a "$S"; }
for what in "${@:-short variants long verify}"; do for w in $what; do case $w in
  short) for _ in 1 2; do plain $B "$A"; plain $F "$A"; done ;;
  variants) for _ in 1 2; do sampler $F; done; sampler $B
            nsys_only $F cuda,nvtx --trace=cuda,nvtx; nsys_only $F cuda,nvtx,osrt --trace=cuda,nvtx,osrt; nsys_only $B cuda,nvtx --trace=cuda,nvtx ;;
  long) for n in "--batches 40 --warmup 2" "--batches 40 --warmup 20" "--batches 120 --warmup 40"; do
          for _ in 1 2; do plain $B "$n"; plain $F "$n"; done; done ;;
  verify) readme $F; readme $B
          $PY -m nsys_transfer verify "$W/$B.sqlite" "$W/$F.sqlite" 2>&1 | head -1 | tee -a "$S" ;;
  *) echo "spawned_start.sh: short, variants, long or verify" >&2; exit 2 ;;
esac; done; done
