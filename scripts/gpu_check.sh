#!/usr/bin/env bash
# What only a GPU can check, in parts that each fit one 10-minute device call:
#   scripts/gpu_check.sh ladder    the `gpu` tests of the ladder and the built-in problems
#   scripts/gpu_check.sh formats   KernelBench, GPU MODE, red team, executors on one GPU
#   scripts/gpu_check.sh inspect   artifacts, profile, trace, calibration, roofline
#   scripts/gpu_check.sh dsls      every DSL's example; CuTeDSL/TileLang from the wheels
#                                  carried into .whl (installed into .whl/site on first use)
#   scripts/gpu_check.sh bench     idle gap, profiler start, timing accuracy (with ncu),
#                                  timing spread, loop latency
# Logs go to $OUT (default /tmp/krung-gpu); run from the repository's root.
set -uo pipefail
OUT=${OUT:-/tmp/krung-gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
part=${1:-ladder}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
gpu_tests() { python3 -m pytest -m gpu -p no:cacheprovider -rs -s --durations=15 "$@"; }
case "$part" in
  ladder) gpu_tests tests/test_gpu.py tests/test_builtin_problems.py 2>&1 | tee "$OUT/ladder.log" ;;
  formats) gpu_tests tests/test_kernelbench.py tests/test_gpumode.py tests/test_red_team.py \
             tests/test_scale.py 2>&1 | tee "$OUT/formats.log" ;;
  inspect) gpu_tests tests/test_gpu_profile_trace.py tests/test_gpu_roofline.py 2>&1 \
             | tee "$OUT/inspect.log" ;;
  dsls)
    # Wheels carried into .whl (scripts/stage_dsl_wheels.sh): install them once, beside it.
    if [ -d .whl ] && [ ! -f .whl/site/pythonpath ] && find .whl -type f -name '*.whl*' | grep -q .; then
      scripts/install_dsl_wheels.sh .whl .whl/site 2>&1 | tail -5 | tee "$OUT/wheels.log"
    fi
    if [ -f .whl/site/pythonpath ]; then export PYTHONPATH="$(cat .whl/site/pythonpath):$PYTHONPATH"; fi
    gpu_tests tests/test_gpu_dsls.py 2>&1 | tee "$OUT/dsls.log" ;;
  bench)
    { python3 benchmarks/idle_gap.py
      python3 benchmarks/profiler_start.py
      python3 benchmarks/timing_accuracy.py --ncu
      python3 benchmarks/timing_spread.py
      python3 benchmarks/loop_latency.py --device cuda --warm 3; } 2>&1 | tee "$OUT/bench.log" ;;
  *) echo "unknown part $part: ladder, formats, inspect, dsls or bench" >&2; exit 2 ;;
esac
