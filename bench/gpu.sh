#!/usr/bin/env bash
# The prepared GPU run (python -m bench.gpu): the predictor at paper scale and `small` (speed, compiled
# rollout, peak memory), model FLOP utilisation against the measured matmul peak, the pipeline at batch 1 and 16
# clips, and with --train a short training burst of the shipped models. Writes gpu.json, gpu.md (and each part's
# own JSON/Markdown) into OUT and prints a summary; under 8 minutes on one GPU is the aim.
#
#   bench/gpu.sh [OUT]                # OUT: the argument, else $OUT, else runs/bench/gpu
#   bench/gpu.sh --dry-run [OUT]      # tiny sizes on the CPU (what the tests run)
#   bench/gpu.sh --train [OUT]        # also the training burst into OUT/weights
# Other flags: --device, --threads, --skip predictor mfu pipeline. PYTHON picks the interpreter (default
# .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
exec "$PY" -m bench.gpu "$@"
