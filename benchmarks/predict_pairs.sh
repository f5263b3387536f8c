#!/usr/bin/env bash
# Before/after pairs for issue 56's predictions, on a GPU machine: each pair's two programs captured the way the README
# asks (`nsys-transfer run`, its Python stacks on; `--sample none --python-backtrace none` so that the capture costs
# each side alike), then timed unprofiled by their own clocks, alternately, REPEAT times each side.
#
#   NSYS_BUNDLE=.carry/nsys2024.tar.xz OUT=out/pairs bash benchmarks/predict_pairs.sh capture|time|befores [PAIR ...]
#
# befores: the before sides captured, then the timing rounds (what a prediction is held to, in one call: each
#   round's lines reach OUT/times.txt as they run, so a call cut short keeps the rounds it finished);
# capture: OUT/captures-K.tar (the scrub happens on the dev machine: scrub-trace) with NAME.sqlite.xz,
#   NAME.pystacks.gz, NAME.run.json and NAME.console per program, in archives of at most 14 MB (the device returns 8
#   files of 16 MiB at most);
# capture_one / pack: the named programs captured (not as pairs), then packed as capture's are;
# time: OUT/times.txt, one `NAME plain ARGS: {RESULT json}` line a run, and a table last.
# PAIRS: programs of tests/programs/strangers56 (default: every pair there); ARGS: the programs' defaults.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
PY=${PYTHON:-python3}; OUT=${OUT:-out/pairs}; W=${RUNS:-/tmp/pairs-runs}; REPEAT=${REPEAT:-3}
DIR=${DIR:-tests/programs/strangers56}
mkdir -p "$OUT" "$W"
if [ -n "${NSYS_BUNDLE:-}" ]; then
  mkdir -p /tmp/nsysb && tar xJf "$NSYS_BUNDLE" -C /tmp/nsysb && NSYS=$(find /tmp/nsysb -path '*target-linux-x64/nsys' | head -1)
  export NSYS
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
what=${1:-time}; shift || true
pairs=("$@")
if [ ${#pairs[@]} -eq 0 ]; then
  for f in "$DIR"/*_fixed.py; do b=$(basename "$f" _fixed.py); pairs+=("$b"); done
fi
res() { grep -h '^RESULT' "$1" | tail -1 || echo "RESULT failed"; }

capture() {  # one program, captured; its files packed later
  local p=$1
  timeout 100 $PY -m nsys_transfer run -o "$W/cap/$p" --force --sample none --python-backtrace none -- \
    $PY "$DIR/$p.py" > "$W/cap/$p.console" 2>&1
  echo "$p captured (exit $?): $(res "$W/cap/$p.console")" | tee -a "$OUT/captures.txt"
  [ -f "$W/cap/$p.sqlite" ] && xz -T0 -6 -f "$W/cap/$p.sqlite"
  rm -f "$W/cap/$p.nsys-rep" "$W/cap/$p.qdstrm"
}

pack() {  # the captures into archives of at most 14 MB each
  local k=0 size=0 list=()
  for f in "$W"/cap/*; do
    s=$(stat -c %s "$f")
    if [ $((size + s)) -gt 14000000 ] && [ ${#list[@]} -gt 0 ]; then
      tar cf "$OUT/captures-$k.tar" -C "$W/cap" "${list[@]}"; k=$((k + 1)); size=0; list=()
    fi
    list+=("$(basename "$f")"); size=$((size + s))
  done
  [ ${#list[@]} -gt 0 ] && tar cf "$OUT/captures-$k.tar" -C "$W/cap" "${list[@]}"
}

timing() {
    for r in $(seq "$REPEAT"); do
      for p in "${pairs[@]}"; do
        for side in "$p" "${p}_fixed"; do
          timeout 120 $PY "$DIR/$side.py" > "$W/o.txt" 2>&1
          echo "$side plain run $r: $(res "$W/o.txt")" | tee -a "$OUT/times.txt"
        done
      done
    done
}

table() {
    $PY - "$OUT/times.txt" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, _, rest = line.partition(" plain ")
    j = rest.find("RESULT ")
    if j < 0 or "failed" in rest[j:]:
        continue
    d = json.loads(rest[j + 7:])
    runs.setdefault(name, []).append((d["wall_s"], d["steady_batches_per_s"]))
print(f"{'pair':28s} {'runs':>4s} {'steady x':>9s} {'wall x':>7s}")
for name in sorted(n for n in runs if not n.endswith("_fixed")):
    b, a = runs[name], runs.get(name + "_fixed", [])
    if not a:
        continue
    steady = statistics.median(x[1] for x in a) / statistics.median(x[1] for x in b)
    wall = statistics.median(x[0] for x in b) / statistics.median(x[0] for x in a)
    print(f"{name:28s} {min(len(a), len(b)):4d} {steady:9.2f} {wall:7.2f}")
EOF
}

case $what in
  befores)
    mkdir -p "$W/cap"
    for p in "${pairs[@]}"; do capture "$p"; done
    pack; timing; table ;;
  capture)
    mkdir -p "$W/cap"
    for p in "${pairs[@]}"; do capture "$p"; capture "${p}_fixed"; done
    pack; ls -la "$OUT" ;;
  capture_one)  # each program named (not its pair): benchmarks/device_owed.sh's after sides
    mkdir -p "$W/cap"
    for p in "${pairs[@]}"; do capture "$p"; done ;;
  pack) pack; ls -la "$OUT" ;;
  time) timing; table ;;
  *) echo "predict_pairs.sh: capture, capture_one, pack, time or befores" >&2; exit 2 ;;
esac
