#!/usr/bin/env bash
# The prepared GPU run of issue 15: predictor at paper scale and `small` (speed, compiled rollout, peak memory),
# model FLOP utilisation against the measured matmul peak, and the pipeline at batch 1 and 16 clips.
# Writes gpu.json, gpu.md (and the parts' own JSON/Markdown) into OUT and prints a summary. < 8 min on one GPU.
#
#   bench/gpu.sh [OUT]                # OUT: the argument, else $OUT, else runs/bench/gpu
#   bench/gpu.sh --dry-run [OUT]      # tiny sizes on the CPU (what the tests run)
#   bench/gpu.sh --train [OUT]        # then a short training burst of the shipped models (the quick recipes)
#                                     #   into OUT/weights (checkpoints in OUT/train-runs)
# Other flags go to bench/gpu.py (--device, --threads, --skip predictor mfu pipeline).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi

train=0
dry=0
args=()
out=""
for a in "$@"; do
  case "$a" in
    --train) train=1 ;;
    --dry-run) dry=1; args+=("$a") ;;
    -*) args+=("$a") ;;
    *) if [[ -z "$out" && "${args[-1]:-}" != "--device" && "${args[-1]:-}" != "--threads" ]]; then out="$a"; else args+=("$a"); fi ;;
  esac
done
out="${out:-${OUT:-runs/bench/gpu}}"
mkdir -p "$out"

"$PY" bench/gpu.py "$out" "${args[@]}"

if [[ "$train" == 1 ]]; then
  device=cuda
  [[ "$dry" == 1 ]] && device=cpu
  echo "[gpu bench] training burst (quick recipes) on $device into $out/weights"
  start=$(date +%s)
  "$PY" -m pipeline.cli train all --quick --no-progress --device "$device" --out "$out/weights" \
      --run-dir "$out/train-runs" 2>&1 | tail -n 20
  echo "[gpu bench] training burst took $(( $(date +%s) - start )) s; weights in $out/weights"
fi
