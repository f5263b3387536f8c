#!/usr/bin/env bash
# The GPU measurements owed by issues 56, 57 and 58, in one or two calls on the GPU machine (from the checkout; NSYS_BUNDLE
# a portable Nsight Systems, ../shared/tools/nsys-portable.sh; $OUT the device tool's folder):
#
#   NSYS_BUNDLE=.carry/nsys2024.tar.xz bash benchmarks/device_owed.sh timing|kineto|cost|afters
#
# timing: issue 56's pairs still short of three alternated unprofiled runs a side (text_encoder_embed,
#         val_metrics_logging of tests/programs/strangers56; audio_mel of tests/programs/strangers), three rounds here
#         (benchmarks/predict_pairs.sh time): OUT/times.txt
# kineto: issue 58's torch.profiler recordings on the GPU (benchmarks/strangers58_gpu.sh): OUT/s58.tar.xz
# cost:   issue 57 item 9, what a capture costs a GPU program by its own clock (benchmarks/capture_cost.py on
#         tests/programs/image_loop.py): OUT/capture_cost_gpu.json
# afters: issue 56's eight new pairs' after sides captured as the befores were (predict_pairs.sh's capture):
#         OUT/captures-K.tar
# OUT/log.txt holds every step's output, and the card.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
O=${OUT:-out/owed}; W=/tmp/owed; mkdir -p "$O" "$W"
export PYTHON=${PYTHON:-python3} PYTHONPATH=$PWD
LOG=$O/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
if [ -n "${NSYS_BUNDLE:-}" ] && [ -z "${NSYS:-}" ]; then
  mkdir -p /tmp/nsysb && tar xJf "$NSYS_BUNDLE" -C /tmp/nsysb
  NSYS=$(find /tmp/nsysb -path '*target-linux-x64/nsys' | head -1); export NSYS
fi
for what in "$@"; do
  t0=$SECONDS
  case $what in
    timing)
      OUT=$W/p56 RUNS=$W/r56 REPEAT=3 bash benchmarks/predict_pairs.sh time text_encoder_embed val_metrics_logging \
        >>"$LOG" 2>&1
      OUT=$W/p47 RUNS=$W/r47 DIR=tests/programs/strangers REPEAT=3 bash benchmarks/predict_pairs.sh time audio_mel \
        >>"$LOG" 2>&1
      cat "$W"/p56/times.txt "$W"/p47/times.txt >"$O/times.txt" ;;
    kineto)
      bash benchmarks/strangers58_gpu.sh "$W/s58" >>"$LOG" 2>&1
      rm -rf "$W/s58/.cache"
      tar cf - -C "$W" s58 | xz -T0 -6 >"$O/s58.tar.xz" ;;
    cost)
      $PYTHON benchmarks/capture_cost.py --runs 3 --rate --clock 'steady="batches_per_s": ([0-9.]+)' \
        --json "$O/capture_cost_gpu.json" -- $PYTHON tests/programs/image_loop.py --device cuda --batches 40 \
        >>"$LOG" 2>&1 ;;
    afters)
      mkdir -p "$W/ra/cap"
      for p in crop_feature_dump ct_volume_segment frame_classifier_numpy gallery_embed_gc heatmap_detector \
               sr_upscale_export text_encoder_embed val_metrics_logging; do
        OUT=$O RUNS=$W/ra bash benchmarks/predict_pairs.sh capture_one "${p}_fixed" >>"$LOG" 2>&1
      done
      OUT=$O RUNS=$W/ra bash benchmarks/predict_pairs.sh pack >>"$LOG" 2>&1 ;;
    *) echo "device_owed.sh: timing, kineto, cost or afters (not $what)" >&2; exit 2 ;;
  esac
  echo "== $what: $((SECONDS - t0)) s" | tee -a "$LOG"
done
tail -40 "$LOG"
