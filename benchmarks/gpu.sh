#!/usr/bin/env bash
# The GPU benchmark: run on a machine with an NVIDIA GPU, from the repository root. Everything goes through the
# toolkit's own commands (nsys-transfer where|bench|scaling|profile|run, analyze-trace, scrub-trace).
#
#   bash benchmarks/gpu.sh [STEP ...]      every step the machine supports, or only the STEPs named
#   make benchmark-gpu [WHAT="bench profile"]   the same after `make install-workloads` (uses .venv)
#   DRY_RUN=1 bash benchmarks/gpu.sh       print the commands only (no GPU needed)
#
# Steps, in this order:
#   where     which Nsight Systems the toolkit finds, checked against the driver (nsys-transfer where); versions
#   tests     the GPU tests: pytest tests/test_gpu.py
#   bench     every stage unprofiled: nsys-transfer bench -> OUT/bench.json, OUT/bench.md
#   scaling   1 GPU against every GPU, unprofiled: nsys-transfer scaling -> OUT/scaling.json (needs 2+ GPUs)
#   profile   stages traced: nsys-transfer profile baseline (3 steps) and pinned (12 steps; with 2+ GPUs also on
#             every GPU in one trace), then analyze-trace --check and the diagnosis
#   programs  the user programs of tests/programs traced whole (nsys-transfer run), the same
#             analysis, and one generate() request counted by torch.profiler (unprofiled)
# Every command runs under `timeout`, its whole output in OUT/logs/. Raw captures: RUNS; each trace scrubbed of the
# recorded environment (scrub-trace) as OUT/traces/NAME_nsysYEAR.sqlite.xz with its .run.json and .nsys.log (the
# capture's console); analyze-trace's text, JSON and --check in OUT/analysis/. A table last (OUT/summary.txt).
# Exit 0 when every step passed, 1 when one failed (a capture whose --check fails counts as failed), 2 on bad usage.
#
# Environment (all optional):
#   OUT=out/gpu  RUNS=$OUT/runs (the raw .nsys-rep/.sqlite, large)
#   PYTHON       the Python with torch (default: .venv/bin/python if there is one, else python3)
#   NSYS         the nsys to use; unset: the toolkit's own search ($NSYS, PATH, /opt/nvidia, `make nsys`'s .nsys/)
#   NSYS_BUNDLE  a tarball of Nsight Systems (holding target-linux-x64/nsys, or bin/nsys): unpacked into a temporary
#                folder and used as NSYS (docs/benchmarks.md says how to pack one for a machine without network)
#   WHEELS       a folder of wheels: each of PACKAGES that PYTHON lacks is installed from it offline (pip --no-index
#                --find-links, without dependencies) into a temporary folder put on PYTHONPATH
#   PACKAGES     default "nvtx>=0.2.5,<0.2.12 torchvision transformers lightning"
#   GPUS         GPUs to use (default: torch.cuda.device_count())
#   BENCH_ARGS   more arguments for nsys-transfer bench, e.g. "--stages ceiling,pinned --steps 30 --warmup 5"
#   SCALING_STAGE=pinned  SCALING_CPUS (e.g. 0-7: a second scaling scenario confined to those CPUs)
#   CAPTURES     STAGE:STEPS[:GPUS] of the profile step (default "baseline:3 pinned:12", plus "pinned:12:N" on N>1 GPUs)
#   PROFILE_ARGS workload arguments for every capture of the profile step, e.g. "--dtype bf16 --channels-last"
#   PROGRAMS     default "hf_generate torchvision_loader lightning_predict"; also cuda_graph_infer, cuda_graph_node
#                (--cuda-graph-trace node), managed_memory, managed_prefetch, sleepy_weights (sleepy_sampled, sleepy_ctxsw: with
#                CPU sampling / context switches only, no OS runtime trace), seg_fast, seg_cpu_argmax,
#                tokenize_embed, resnet_no_nvtx, compiled_server, cupy_numpy_post (issue 35; seg_cpu_argmax_nosample,
#                tokenize_embed_nosample: the same without CPU samples or Python backtraces; hf_embed_fixed16: issue 37's
#                16-batch run, its set-up on the clock); TORCH_PROFILER=0 leaves
#                out its count
#   T_TESTS=900 T_BENCH=3600 T_SCALING=2400 T_CAPTURE=600 T_PROGRAM=400 T_ANALYZE=300   seconds per command
# Two Nsight Systems versions side by side: run the step once with each (the names carry the version's year), e.g.
#   NSYS_BUNDLE=nsys2023.tar.xz bash benchmarks/gpu.sh programs; NSYS_BUNDLE=nsys2024.tar.xz bash benchmarks/gpu.sh programs
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

ALL_STEPS=(where tests bench scaling profile programs)
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
steps=()
for a in "$@"; do
  case $a in
    -h|--help) usage; exit 0 ;;
    all) steps+=("${ALL_STEPS[@]}") ;;
    where|tests|bench|scaling|profile|programs) steps+=("$a") ;;
    *) echo "gpu.sh: unknown step '$a' (steps: ${ALL_STEPS[*]}; --help)" >&2; exit 2 ;;
  esac
done
named=${#steps[@]}
[ "$named" -gt 0 ] || steps=("${ALL_STEPS[@]}")

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null ||
  { echo "gpu.sh: PYTHON=$PYTHON does not run, or is older than Python 3.10" >&2; exit 2; }
OUT=${OUT:-out/gpu}
RUNS=${RUNS:-$OUT/runs}
DRY_RUN=${DRY_RUN:-}
read -ra PACKAGES <<< "${PACKAGES:-nvtx>=0.2.5,<0.2.12 torchvision transformers lightning}"
read -ra BENCH_ARGS <<< "${BENCH_ARGS:-}"
read -ra PROGRAMS <<< "${PROGRAMS:-hf_generate torchvision_loader lightning_predict}"
SCALING_STAGE=${SCALING_STAGE:-pinned}
SCALING_CPUS=${SCALING_CPUS:-}
TORCH_PROFILER=${TORCH_PROFILER:-1}
T_TESTS=${T_TESTS:-900} T_BENCH=${T_BENCH:-3600} T_SCALING=${T_SCALING:-2400} T_CAPTURE=${T_CAPTURE:-600}
T_PROGRAM=${T_PROGRAM:-400} T_ANALYZE=${T_ANALYZE:-300}
# what each program needs besides torch, and its arguments (the ones docs/benchmarks.md reports)
declare -A PROGRAM_NEEDS=([hf_generate]="transformers" [torchvision_loader]="torchvision"
                          [lightning_predict]="torchvision lightning" [cuda_graph_infer]="" [cuda_graph_node]=""
                          [managed_memory]="cupy" [managed_prefetch]="cupy" [sleepy_weights]="" [sleepy_sampled]="" [sleepy_ctxsw]=""
                          [hf_embed]="transformers" [hf_embed_fixed]="transformers" [hf_embed_fixed16]="transformers"
                          [seg_logits]="torchvision"
                          [seg_logits_fixed]="torchvision" [image_loop]="torchvision" [image_loop_fixed]="torchvision"
                          [seg_fast]="torchvision" [seg_cpu_argmax]="torchvision" [seg_cpu_argmax_nosample]="torchvision"
                          [tokenize_embed]="transformers tokenizers" [tokenize_embed_nosample]="transformers tokenizers"
                          [resnet_no_nvtx]="torchvision" [compiled_server]="" [cupy_numpy_post]="cupy")
declare -A PROGRAM_ARGS=([hf_generate]="--requests 3" [torchvision_loader]="--batches 20 --warmup 3 --workers 2"
                         [lightning_predict]="--batches 10 --workers 4" [cuda_graph_infer]="--requests 20"
                         [cuda_graph_node]="--requests 20" [managed_memory]="--steps 10"
                         [managed_prefetch]="--steps 10 --prefetch" [sleepy_weights]="--steps 8" [sleepy_sampled]="--steps 8"
                         [sleepy_ctxsw]="--steps 8" [hf_embed]="--batches 10" [hf_embed_fixed]="--batches 10"
                         [hf_embed_fixed16]="--batches 16 --warmup 0"
                         [seg_logits]="--batches 10" [seg_logits_fixed]="--batches 10" [image_loop]="--batches 16"
                         [image_loop_fixed]="--batches 16" [seg_fast]="--steps 16" [seg_cpu_argmax]="--batches 10"
                         [seg_cpu_argmax_nosample]="--batches 10" [tokenize_embed]="--batches 10"
                         [tokenize_embed_nosample]="--batches 10" [resnet_no_nvtx]="--batches 40"
                         [compiled_server]="--requests 200" [cupy_numpy_post]="--steps 12")
# a variant's program file, where it is not NAME.py, and the nsys-transfer run options it adds
declare -A PROGRAM_FILE=([cuda_graph_node]=cuda_graph_infer [managed_memory]=managed_memory
                         [managed_prefetch]=managed_memory [sleepy_sampled]=sleepy_weights
                         [sleepy_ctxsw]=sleepy_weights [seg_cpu_argmax_nosample]=seg_cpu_argmax
                         [tokenize_embed_nosample]=tokenize_embed [hf_embed_fixed16]=hf_embed_fixed)
# (nsys-transfer run records CPU samples, context switches and Python backtraces of CUDA calls by default; sleepy_weights
# and sleepy_ctxsw are the captures without samples, the *_nosample variants the same programs without, for the cost)
declare -A PROGRAM_RUN=([cuda_graph_node]="--cuda-graph-trace node" [managed_memory]="--um-page-faults"
                        [managed_prefetch]="--um-page-faults" [sleepy_weights]="--sample none --python-backtrace none"
                        [sleepy_sampled]="--sample cpu --cpuctxsw process-tree"
                        [sleepy_ctxsw]="--trace cuda,nvtx --sample none --cpuctxsw process-tree --python-backtrace none"
                        [seg_cpu_argmax_nosample]="--sample none --python-backtrace none"
                        [tokenize_embed_nosample]="--sample none --python-backtrace none"
                        [hf_embed_fixed16]="--sample none --python-backtrace none")
for p in "${PROGRAMS[@]}"; do
  [ -n "${PROGRAM_ARGS[$p]:-}" ] || { echo "gpu.sh: unknown program '$p' (tests/programs: ${!PROGRAM_ARGS[*]})" >&2; exit 2; }
done

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false  # the programs make their own models

# Python modules (requirement names) that PYTHON lacks; "lightning" is also found as pytorch_lightning
missing_modules() {
  "$PYTHON" -c 'import importlib.util, re, sys
alt = {"lightning": ("lightning", "pytorch_lightning")}
for req in sys.argv[1:]:
    mod = re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].replace("-", "_")
    if not any(importlib.util.find_spec(m) for m in alt.get(mod, (mod,))):
        print(req)' "$@" 2>/dev/null
}

if [ -n "${GPUS:-}" ]; then ngpu=$GPUS
else
  ngpu=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null) ||
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
case $ngpu in ''|*[!0-9]*) ngpu=0 ;; esac

# the steps this machine supports
todo=()
for s in "${steps[@]}"; do
  if [ "$s" = scaling ] && [ "$ngpu" -lt 2 ] && [ "$named" -eq 0 ]; then continue; fi
  todo+=("$s")
done
if [ "$ngpu" -eq 0 ] && [ -z "$DRY_RUN" ] && [ "${todo[*]}" != where ]; then
  echo "gpu.sh: no CUDA GPU visible to $PYTHON (torch.cuda.device_count() = 0); every step but 'where' needs one" \
       "(DRY_RUN=1 shows the commands; GPUS=N overrides the count)" >&2
  exit 2
fi
if [ -n "${CAPTURES:-}" ]; then read -ra CAPTURES <<< "$CAPTURES"
else CAPTURES=(baseline:3 pinned:12); [ "$ngpu" -lt 2 ] || CAPTURES+=("pinned:12:$ngpu"); fi

missing=()
while read -r m; do [ -n "$m" ] && missing+=("$m"); done < <(missing_modules "${PACKAGES[@]}")
YEAR=YYYY  # of the nsys in use, in the traces' names; known once nsys is found
nsys_year() {
  local line
  line=$("$PYTHON" -m nsys_transfer where 2>/dev/null | tail -n1) || return 1
  line=$(sed -n 's/^Nsight Systems \([0-9][0-9]*\)\..*/\1/p' <<< "$line")  # "Nsight Systems 2024.2.3.38 at ..."
  [ -n "$line" ] && echo "$line"
}
[ -n "${NSYS_BUNDLE:-}" ] || YEAR=$(nsys_year) || YEAR=YYYY

TMP=""
cleanup() { [ -z "$TMP" ] || rm -rf "$TMP"; }
trap cleanup EXIT

# ---- helpers ----------------------------------------------------------------------------------------------------
PASS=plan  # plan: print each command; live: run it
live() { [ "$PASS" = live ]; }
quote() {  # the command as one would type it: words with shell characters in single quotes
  local a out=""
  for a in "$@"; do
    if [[ $a =~ ^[][A-Za-z0-9_./:=,@%+-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
  done
  printf '%s' "${out% }"
}
# x LOG LIMIT CMD...: CMD under `timeout LIMIT`, stdout and stderr into LOG; its exit status (124: timed out)
x() {
  local log=$1 limit=$2; shift 2
  if ! live; then printf '  timeout %s %s > %s 2>&1\n' "$limit" "$(quote "$@")" "$log"; return 0; fi
  printf '+ %s  (log %s)\n' "$(quote "$@")" "$log"
  local rc
  timeout --kill-after=30 "$limit" "$@" > "$log" 2>&1 &  # in the background, so that an interrupt can stop it
  CHILD=$!
  wait "$CHILD"; rc=$?
  CHILD=""
  return "$rc"
}
# Ctrl-C or TERM: timeout runs its command in a process group of its own, which a terminal's interrupt does not
# reach; pass the signal on to it (timeout forwards it to that group), then stop
CHILD=""
interrupted() {
  trap - INT TERM
  if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; fi
  echo "gpu.sh: interrupted" >&2; exit 130
}
trap interrupted INT TERM
have() { ! live || [ -s "$1" ]; }
result() { case $1 in 0) echo ok ;; 124|137) echo timeout ;; *) echo "failed (exit $1)" ;; esac; }
# row STEP ITEM RESULT SECONDS DETAIL: one line of the table
row() {
  live || return 0
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$(tr '\t\n' '  ' <<< "$5" | cut -c1-200)" >> "$OUT/summary.tsv"
  printf '   -> %s %s: %s  %s\n' "$1" "$2" "$3" "$5"
}
heading() { if live; then printf '\n== %s\n' "$*"; else printf '  # %s\n' "$*"; fi; }
last_error() { tr '\r' '\n' < "$1" | grep -aE 'rror|Traceback|warning|profile:' | tail -n1 | cut -c1-150; }

# ---- set-up: a bundled nsys, wheels ------------------------------------------------------------------------------
setup() {
  if [ -n "${NSYS_BUNDLE:-}" ] || { [ -n "${WHEELS:-}" ] && [ "${#missing[@]}" -gt 0 ]; }; then
    if live; then TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bench.XXXXXX"); mkdir -p "$TMP/nsys" "$TMP/site"; fi
  fi
  local t=$SECONDS rc n m
  if [ -n "${NSYS_BUNDLE:-}" ]; then
    heading "set-up: Nsight Systems from $NSYS_BUNDLE"
    live || echo "  # NSYS_BUNDLE: unpacked into a temporary folder; its target-linux-x64/nsys becomes NSYS"
    x "$OUT/logs/nsys-bundle.log" 600 tar -xf "$NSYS_BUNDLE" -C "${TMP:-\$TMP}/nsys"; rc=$?
    if live; then
      n=$(find "$TMP/nsys" -type f -name nsys -path '*target-linux-x64/nsys' | head -n1)
      [ -n "$n" ] || n=$(find "$TMP/nsys" -type f -name nsys -path '*/bin/nsys' | head -n1)
      if [ "$rc" -ne 0 ] || [ -z "$n" ]; then
        row set-up "$NSYS_BUNDLE" "failed" $((SECONDS - t)) "no target-linux-x64/nsys or bin/nsys in it"; return 1
      fi
      export NSYS=$n
      row set-up "nsys bundle" ok $((SECONDS - t)) "NSYS=$NSYS"
    fi
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ -z "${WHEELS:-}" ]; then
      live || echo "  # $PYTHON lacks ${missing[*]} (WHEELS=dir would install them; steps that need them fail or skip)"
    else
      heading "set-up: ${missing[*]} from $WHEELS"
      for m in "${missing[@]}"; do
        t=$SECONDS
        x "$OUT/logs/pip-${m%%[<>=!~]*}.log" 600 "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" \
          --no-deps --target "${TMP:-\$TMP}/site" "$m"; rc=$?
        row set-up "wheel ${m%%[<>=!~]*}" "$(result "$rc")" $((SECONDS - t)) "$(live && [ "$rc" -ne 0 ] && last_error "$OUT/logs/pip-${m%%[<>=!~]*}.log")"
      done
      live || echo "  # then PYTHONPATH=\$PYTHONPATH:\$TMP/site"
      if live; then export PYTHONPATH="$PYTHONPATH:$TMP/site"; fi
    fi
  fi
  if live; then YEAR=$(nsys_year) || YEAR=unknown; fi
  return 0
}

# the software versions docs/benchmarks.md states for each figure
VERSIONS='import importlib.metadata as md, platform, torch; names = ("torchvision", "nvtx", "transformers", "lightning", "pytorch-lightning"); print("python", platform.python_version(), "| torch", torch.__version__, "CUDA", torch.version.cuda, "|", *sorted(d.metadata["Name"] + " " + d.version for d in md.distributions() if d.metadata["Name"].lower() in names))'
# ---- steps -------------------------------------------------------------------------------------------------------
step_where() {
  heading "where: Nsight Systems and the driver"
  local t=$SECONDS rc line
  x "$OUT/logs/where.log" 120 "$PYTHON" -m nsys_transfer where; rc=$?
  x "$OUT/versions.txt" 120 "$PYTHON" -c "$VERSIONS"
  x "$OUT/logs/nvidia-smi.log" 60 nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max,memory.total --format=csv
  live || return 0
  cat "$OUT/logs/where.log" "$OUT/versions.txt" "$OUT/logs/nvidia-smi.log" 2>/dev/null
  line=$(grep -a '^Nsight Systems ' "$OUT/logs/where.log" | tail -n1)
  [ "$rc" -eq 0 ] || line=$(tail -n1 "$OUT/logs/where.log")
  row where nsys "$(result "$rc")" $((SECONDS - t)) "$line$(grep -aom1 'warning: .*' "$OUT/logs/where.log" | sed 's/^/; /')"
}

step_tests() {
  heading "tests: pytest tests/test_gpu.py"
  local t=$SECONDS rc
  x "$OUT/logs/tests.log" "$T_TESTS" "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_gpu.py; rc=$?
  live || return 0
  tail -n 5 "$OUT/logs/tests.log"
  row tests tests/test_gpu.py "$(result "$rc")" $((SECONDS - t)) \
    "$(grep -aE '[0-9]+ (passed|failed|error|skipped)|no tests ran' "$OUT/logs/tests.log" | tail -n1 | tr -d '=')"
}

step_bench() {
  heading "bench: every stage unprofiled"
  local t=$SECONDS rc res detail
  x "$OUT/logs/bench.log" "$T_BENCH" "$PYTHON" -m nsys_transfer bench --out "$OUT/bench.json" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}; rc=$?
  live || return 0
  cat "$OUT/bench.md" 2>/dev/null || tail -n 5 "$OUT/logs/bench.log"
  res=$(result "$rc")
  # | stage | steps/s | vs baseline | vs ceiling | integrity | steps |
  detail=$(awk -F'|' 'NR > 2 { gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $5); gsub(/ /, "", $6)
      n++; if ($3 == "failed" || $6 == "FAILED") bad = bad " " $2
      if ($2 == "pinned" || $2 == "baseline" || $2 == "ceiling") s = s ", " $2 " " $3 ($5 != "" ? " (" $5 " of ceiling)" : "") }
    END { printf "%d stages%s%s", n, s, (bad != "" ? "; failed:" bad : "") }' "$OUT/bench.md" 2>/dev/null)
  if [ "$res" = ok ] && { [ ! -s "$OUT/bench.md" ] || grep -q 'failed:' <<< "$detail"; }; then res=failed; fi
  row bench "stages" "$res" $((SECONDS - t)) "${detail:-$(last_error "$OUT/logs/bench.log")}"
}

step_scaling() {
  heading "scaling: $SCALING_STAGE on 1 GPU against $ngpu"
  local t rc label cpus
  if [ "$ngpu" -lt 2 ]; then
    live || echo "  # scaling skipped: $ngpu GPU(s) visible"
    row scaling "$SCALING_STAGE" "skip" 0 "needs 2 or more GPUs, $ngpu visible"; return 0
  fi
  live && rm -f "$OUT/scaling.json"  # the command appends scenarios: start afresh
  for cpus in "" ${SCALING_CPUS:+"$SCALING_CPUS"}; do
    t=$SECONDS; label=${cpus:+cpus-$cpus}; label=${label:-all-cpus}
    x "$OUT/logs/scaling-$label.log" "$T_SCALING" "$PYTHON" -m nsys_transfer scaling --stage "$SCALING_STAGE" \
      --gpus "$ngpu" ${cpus:+--cpus "$cpus"} --out "$OUT/scaling.json"; rc=$?
    live || continue
    tail -n 3 "$OUT/logs/scaling-$label.log"
    row scaling "$SCALING_STAGE x$ngpu, $label" "$(result "$rc")" $((SECONDS - t)) \
      "$(grep -a 'x N x single' "$OUT/logs/scaling-$label.log" | tail -n1 | sed 's/; written to .*//')$([ "$rc" -eq 0 ] || last_error "$OUT/logs/scaling-$label.log")"
  done
}

# analyze STEP NAME SQLITE CAPTURE_RC T0 CAPTURE_LOG: --check, the diagnosis, scrub-trace; one row
analyze() {
  local step=$1 name=$2 sqlite=$3 rc=$4 t=$5 log=$6 tag="${2}_nsys$YEAR" crc arc res detail verdict top
  local a="$OUT/analysis/$tag" base=${3%.sqlite}
  if ! have "$sqlite"; then
    row "$step" "$tag" "$(result "$rc")" $((SECONDS - t)) "no trace; $(last_error "$log") (log $log)"; return 0
  fi
  x "$a.check.txt" "$T_ANALYZE" "$PYTHON" -m nsys_transfer.analysis "$sqlite" --check; crc=$?
  x "$a.txt" "$T_ANALYZE" "$PYTHON" -m nsys_transfer.analysis "$sqlite" --json "$a.json"; arc=$?
  x "$OUT/logs/scrub-$tag.log" "$T_ANALYZE" "$PYTHON" -m nsys_transfer.analysis.cli.scrub "$sqlite" "$OUT/traces/$tag.sqlite.xz"
  live || { echo "  cp $base.run.json $OUT/traces/$tag.run.json; cp $log $OUT/traces/$tag.nsys.log"; return 0; }
  cp "$base.run.json" "$OUT/traces/$tag.run.json" 2>/dev/null
  cp "$log" "$OUT/traces/$tag.nsys.log"
  verdict=$(grep -aFm1 "$sqlite: " "$a.check.txt" | sed 's/^.*: //')
  echo "--check: ${verdict:-?} $(grep -a '^  => ' "$a.check.txt" | tr -s ' ')"
  grep -aE '^GPU busy|^steps|^  \[(high|medium)\]' "$a.txt" | cut -c1-220
  res=$(result "$rc")
  if [ "$res" = ok ] && [ "$crc" -ne 0 ]; then res="failed (--check)"; fi
  if [ "$res" = ok ] && [ "$arc" -ne 0 ]; then res="failed (analysis)"; fi
  top=$(grep -aEm1 '^  \[(high|medium)\]' "$a.txt" | sed -E 's/^ +//; s/\): .*/)/')
  detail="${verdict:-no --check verdict}; ${top:-no high or medium finding}; $(grep -am1 '^GPU busy' "$a.txt" | cut -d, -f1)"
  detail+="$(grep -am1 '^steps' "$a.txt" | grep -oE ', [0-9.]+ steps/s')"
  row "$step" "$tag" "$res" $((SECONDS - t)) "$detail"
}

step_profile() {
  local spec stage steps gpus name log t rc args extra
  for spec in "${CAPTURES[@]}"; do
    IFS=: read -r stage steps gpus <<< "$spec"; gpus=${gpus:-1}
    name=$stage; [ "$gpus" -le 1 ] || name="$stage-x${gpus}gpu"
    heading "profile: $name, $steps steps"
    args=(profile "$stage" --steps "$steps" --warmup 3 --out-dir "$RUNS" --force)
    [ "$gpus" -le 1 ] || args+=(--gpus "$gpus")
    [ -z "${PROFILE_ARGS:-}" ] || { read -ra extra <<< "$PROFILE_ARGS"; args+=(-- "${extra[@]}"); }
    log="$OUT/logs/profile-$name.log"; t=$SECONDS
    live && rm -f "$RUNS/$name/$name".*  # never analyse an earlier run's trace
    x "$log" "$T_CAPTURE" "$PYTHON" -m nsys_transfer "${args[@]}"; rc=$?
    analyze profile "$name" "$RUNS/$name/$name.sqlite" "$rc" "$t" "$log"
  done
}

step_programs() {
  local p lacking base log t rc need args run_opts
  for p in "${PROGRAMS[@]}"; do
    heading "programs: $p"
    read -ra need <<< "${PROGRAM_NEEDS[$p]}"
    lacking=$(missing_modules "${need[@]}" | tr '\n' ' '); lacking=${lacking% }
    if [ -n "$lacking" ] && { live || [ -z "${WHEELS:-}" ]; }; then  # in the plan, WHEELS is taken to supply it
      live || echo "  # $p left out: $PYTHON lacks $lacking"
      row programs "$p" skip 0 "$PYTHON lacks $lacking (WHEELS=dir installs it)"; continue
    fi
    base="$RUNS/programs/${p}_nsys$YEAR"; log="$OUT/logs/run-${p}_nsys$YEAR.log"; t=$SECONDS
    live && rm -f "$base".*
    read -ra args <<< "${PROGRAM_ARGS[$p]}"
    read -ra run_opts <<< "${PROGRAM_RUN[$p]:-}"
    x "$log" "$T_PROGRAM" "$PYTHON" -m nsys_transfer run -o "$base" --force --trace cuda,nvtx,osrt "${run_opts[@]}" \
      -- "$PYTHON" "tests/programs/${PROGRAM_FILE[$p]:-$p}.py" --device cuda "${args[@]}"; rc=$?
    analyze programs "$p" "$base.sqlite" "$rc" "$t" "$log"
    if [ "$p" = hf_generate ] && [ "$TORCH_PROFILER" = 1 ]; then
      t=$SECONDS
      x "$OUT/logs/hf_generate-torch-profiler.log" "$T_PROGRAM" "$PYTHON" tests/programs/hf_generate.py --device cuda \
        --torch-profiler; rc=$?
      row programs "hf_generate torch.profiler" "$(result "$rc")" $((SECONDS - t)) \
        "$(live && grep -a 'torch.profiler one request' "$OUT/logs/hf_generate-torch-profiler.log" | tail -n1)"
    fi
  done
}

all_steps() {
  setup || return 0
  local s
  for s in "${todo[@]}"; do "step_$s"; done
}

# ---- the plan first, then the run -------------------------------------------------------------------------------
echo "benchmarks/gpu.sh: steps ${todo[*]} | $ngpu GPU(s) | PYTHON=$PYTHON | OUT=$OUT RUNS=$RUNS"
if [ -n "${NSYS_BUNDLE:-}" ]; then nsys_from="NSYS_BUNDLE=$NSYS_BUNDLE"; elif [ -n "${NSYS:-}" ]; then nsys_from="NSYS=$NSYS"
else nsys_from="the toolkit's search (PATH, /opt/nvidia, make nsys's .nsys/)"; fi
echo "  nsys: $nsys_from; traces named NAME_nsys$YEAR"
echo "  PYTHONPATH=$PYTHONPATH; missing Python packages: ${missing[*]:-none}${WHEELS:+; WHEELS=$WHEELS}"
[ "$named" -gt 0 ] || [ "$ngpu" -ge 2 ] || echo "  scaling left out: $ngpu GPU(s) visible"
echo "commands:"
all_steps
if [ -n "$DRY_RUN" ]; then echo "DRY_RUN: nothing was run"; exit 0; fi

mkdir -p "$OUT/logs" "$OUT/analysis" "$OUT/traces" "$RUNS" || exit 2
: > "$OUT/summary.tsv"
PASS=live
all_steps

{ printf '%-9s %-32s %-18s %6s  %s\n' step item result seconds detail
  awk -F'\t' '{ printf "%-9s %-32s %-18s %6s  %s\n", $1, $2, $3, $4, $5 }' "$OUT/summary.tsv"; } > "$OUT/summary.txt"
printf '\n== summary (%s; logs in %s/logs, traces in %s/traces)\n' "$OUT/summary.txt" "$OUT" "$OUT"
cat "$OUT/summary.txt"
bad=$(awk -F'\t' '$3 != "ok" && $3 != "skip"' "$OUT/summary.tsv" | wc -l)
[ "$bad" -eq 0 ] || { echo "$bad failed"; exit 1; }
