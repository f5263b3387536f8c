#!/usr/bin/env bash
# Real nsys traces of three user-style PyTorch programs (tests/programs/): a torchvision DataLoader + resnet50
# loop, a Hugging Face GPT-2 generate() loop, and a Lightning Trainer.predict loop with emit_nvtx. Each is
# captured whole (--no-capture-range) through the toolkit's own `python3 -m profiling run`, exported to SQLite
# on the GPU machine, and xz'd; each program is captured with nsys 2023.4 and 2024.2 (hf_generate first), and
# one generate() request is also counted with torch.profiler (unprofiled by nsys). Results: $OUT/programs.tar
# (NAME.sqlite.xz, NAME.log = the full nsys console output, NAME.run.json, NAME.export.log, torch_profiler.txt,
# versions.txt) and $OUT/table.txt. tests/data/programs/ holds them scrubbed (scrub-trace) as
# <program>_nsys<2023|2024>.sqlite.xz, .nsys.log (= NAME.log) and .run.json.
# nsys 2023.4 loses CUDA events on CUDA 13 ("Unknown runtime API function index: 468" =
# cudaGetDriverEntryPointByVersion_v12050 in the importer); 2024.2 records them (it warns that driver 13.0 is
# not supported and uses its CUDA 12.5 libraries).
#
# Bundles (here, on a machine with apt): .carry/nsys2023.tar.xz and .carry/nsys2024.tar.xz, each unpacking to
# nsys/{target,host}-linux-x64. Both together must fit the 64 MiB carry limit, so pack them slim:
#   ./benchmarks/gpu_programs.sh pack ROOT OUT.tar.xz   # ROOT = nsys install with target-/host-linux-x64
# 2023.4.4: ROOT = .nsys (make nsys). 2024.2.3.38: Debian experimental non-free `nsight-systems`,
# `nsight-systems-target`, plus `libarrow500` and `libparquet500` (QdstrmImporter of 2024.2 links
# libarrow.so.500, which that package does not ship), dpkg -x'd and merged as in profiling/install_nsys.sh;
# copy libarrow.so.500, libparquet.so.500 and a real libssh.so(.4) into host-linux-x64/ before packing.
# On the GPU machine (run from the repository root, carry .carry):
#   bash benchmarks/gpu_programs.sh            # BUDGET_S=520 seconds by default; ONLY="hf_generate_nsys2024 ..."
set -u
if [ "${1:-}" = pack ]; then  # slim bundle: the portable pack minus sqlite3 and unused injection libraries
  set -e; root=$2; out=$(realpath -m "$3"); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  ../shared/tools/nsys-portable.sh "$root" "$tmp/fat.tar.xz" 2>/dev/null || /work/shared/tools/nsys-portable.sh "$root" "$tmp/fat.tar.xz"
  tar xJf "$tmp/fat.tar.xz" -C "$tmp"
  (cd "$tmp/nsys/target-linux-x64" && rm -f sqlite3 libToolsInjectionCuBLAS64_* libToolsInjectionCuDNN64_* \
    libToolsInjectionMPICH64.so libToolsInjectionOpenMPI64.so libToolsInjectionOpenSHMEM64.so libToolsInjectionUCP64.so \
    libToolsInjectionPythonBacktrace64.so libToolsInjectionPythonGilTracing64.so)
  tar -C "$tmp" -cf - nsys | xz -T0 -9e > "$out"; ls -la "$out"; exit 0
fi

export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-out/gpu_programs}
W=/tmp/gpu_programs; rm -rf "$W"; mkdir -p "$OUT" "$W"
start=$(date +%s); budget=${BUDGET_S:-520}
left() { echo $(( budget - ($(date +%s) - start) )); }
declare -A NSYS_OF
for v in 2023 2024; do
  if [ -f .carry/nsys$v.tar.xz ]; then
    mkdir -p /tmp/nsys$v && tar xJf .carry/nsys$v.tar.xz -C /tmp/nsys$v && NSYS_OF[$v]=/tmp/nsys$v/nsys/target-linux-x64/nsys
    echo "nsys$v: $(${NSYS_OF[$v]} --version 2>&1 | tail -1)"
  fi
done
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, torchvision, transformers, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| torchvision', torchvision.__version__, '| transformers', transformers.__version__, '| lightning', lightning.__version__)"
  for v in "${!NSYS_OF[@]}"; do echo "nsys$v: $(${NSYS_OF[$v]} --version 2>&1 | tail -1)"; done; } > "$W/versions.txt" 2>&1
cat "$W/versions.txt"

cap() { # cap NAME NSYS_YEAR PROGRAM [ARGS...]: one whole-program capture through the toolkit
  local name=$1 v=$2 prog=$3; shift 3
  if [ -z "${NSYS_OF[$v]:-}" ]; then echo "skip $name: no nsys$v bundle"; return; fi
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  if [ "$(left)" -lt 90 ]; then echo "skip $name: out of time ($(left) s left)"; return; fi
  local t=$(date +%s)
  NSYS=${NSYS_OF[$v]} timeout $(( $(left) - 20 < ${CAP_S:-170} ? $(left) - 20 : ${CAP_S:-170} )) python3 -m profiling run -o "$W/$name" --force \
    --trace "${TRACE:-cuda,nvtx,osrt}" --no-capture-range -- python3 "tests/programs/$prog.py" --device "${DEVICE:-cuda}" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t )) s; $(tr '\r' '\n' < "$W/$name.log" | grep -aE 'Importer|error|Error|warning|WARNING|batches/s|tokens/s|emit_nvtx' | sort | uniq -c | head -8 | tr -s ' ' | tr '\n' ';')"
  echo "$(( $(date +%s) - t ))" > "$W/$name.seconds"
  if [ -f "$W/$name.nsys-rep" ] && [ "${EXPORT_LOG:-1}" = 1 ]; then  # the export's own messages (the toolkit keeps them quiet)
    ${NSYS_OF[$v]} export --type=sqlite --force-overwrite=true --output="$W/$name.reexport.sqlite" "$W/$name.nsys-rep" > "$W/$name.export.log" 2>&1
    echo "exit $?" >> "$W/$name.export.log"; rm -f "$W/$name.reexport.sqlite"
  fi
  [ -f "$W/$name.sqlite" ] && xz -T0 -6 -k -f "$W/$name.sqlite"
  rm -f "$W/$name.nsys-rep" "$W/$name.qdstrm"
}

# hf_generate first: the question is whether each nsys records generate() completely
cap hf_generate_nsys2023 2023 hf_generate --requests 3
cap hf_generate_nsys2024 2024 hf_generate --requests 3
if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" torch_profiler "* ]]; then
  timeout 120 python3 tests/programs/hf_generate.py --device cuda --torch-profiler > "$W/torch_profiler.txt" 2>&1
  echo "torch.profiler: exit $? $(grep -a 'torch.profiler one request' "$W/torch_profiler.txt")"
fi
cap torchvision_loader 2023 torchvision_loader --batches 20 --warmup 3 --workers 2
cap lightning_predict 2023 lightning_predict --batches 10 --workers 4
cap torchvision_loader_nsys2024 2024 torchvision_loader --batches 20 --warmup 3 --workers 2
cap lightning_predict_nsys2024 2024 lightning_predict --batches 10 --workers 4

python3 - "$W" > "$W/table.txt" 2>&1 <<'EOF'
import glob, os, re, sqlite3, statistics, sys
w = sys.argv[1]
STEP = re.compile(r"^(batch|request|predict_batch) \d+$")
def q(con, sql, default=0):
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return default
rows = []
for path in sorted(glob.glob(f"{w}/*.sqlite")):
    name = os.path.basename(path)[:-7]
    con = sqlite3.connect(path)
    ver = q(con, "SELECT value FROM META_DATA_EXPORT WHERE name='EXPORT_PRODUCT_VERSION'", "?")
    k = q(con, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    m = q(con, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    ms = q(con, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")
    rt = q(con, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    launches = q(con, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id=r.nameId WHERE s.value LIKE '%Launch%'")
    nv = q(con, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)")
    osrt = q(con, "SELECT COUNT(*) FROM OSRT_API")
    # GPU work launched inside each step range (kernels + memcpy + memset whose runtime call is inside it)
    per = {}
    try:
        rng = con.execute("SELECT COALESCE(n.text, s.value), n.start, n.end, n.globalTid FROM NVTX_EVENTS n "
                          "LEFT JOIN StringIds s ON s.id=n.textId WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL").fetchall()
        corr, rt_rows = set(), []
        for t in ("KERNEL", "MEMCPY", "MEMSET"):
            try:
                corr |= {c for (c,) in con.execute(f"SELECT correlationId FROM CUPTI_ACTIVITY_KIND_{t}")}
            except sqlite3.Error:
                pass
        try:
            rt_rows = con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
        except sqlite3.Error:
            pass
        for text, s, e, tid in rng:
            if text and STEP.match(text):
                per[text] = sum(1 for (rs, rtid, c) in rt_rows if rtid == tid and s <= rs <= e and c in corr)
    except sqlite3.Error:
        pass
    steps = sorted(per.values())
    stepcol = (f"{len(steps)} steps, GPU ops/step min {steps[0]} med {statistics.median(steps):.0f} max {steps[-1]}"
               if steps else "no step ranges")
    diag = [r[0] for r in con.execute("SELECT DISTINCT text FROM DIAGNOSTIC_EVENT LIMIT 20")] if q(con, "SELECT COUNT(*) FROM DIAGNOSTIC_EVENT", 0) else []
    secs = open(f"{w}/{name}.seconds").read().strip() if os.path.exists(f"{w}/{name}.seconds") else "?"
    xz = os.path.getsize(path + ".xz") if os.path.exists(path + ".xz") else 0
    rows.append((name, ver, k, m, ms, rt, launches, nv, osrt, os.path.getsize(path) / 1e6, xz / 1e6, secs, stepcol))
    print(f"# {name}: per step {dict(sorted(per.items(), key=lambda kv: int(kv[0].split()[-1])))}")
    for d in diag:
        print(f"#   diagnostic: {' '.join(d.split())[:160]}")
print("| program | nsys | kernels | memcpy | memset | CUDA API rows | launch calls | NVTX ranges | OSRT rows | sqlite MB | xz MB | s | steps |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(f"{x:.2f}" if isinstance(x, float) else str(x) for x in r) + " |")
EOF
cat "$W/table.txt" "$W/torch_profiler.txt" 2>/dev/null | grep -aE '^[|#]|torch.profiler one request'
(cd "$W" && tar cf "$OUT/programs.tar" *.sqlite.xz *.log *.run.json versions.txt table.txt torch_profiler.txt 2>/dev/null)
cp "$W/table.txt" "$OUT/table.txt"
ls -la "$OUT"; echo "total $(( $(date +%s) - start )) s"
