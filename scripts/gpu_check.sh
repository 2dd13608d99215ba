#!/usr/bin/env bash
# What only a GPU can check, in parts that each fit one 10-minute device call:
#   scripts/gpu_check.sh tests     the `gpu` tests of the ladder, trust, formats
#   scripts/gpu_check.sh inspect   the `gpu` tests of artifacts, profile, trace, roofline
#   scripts/gpu_check.sh bench     timing accuracy (with ncu), profiler start, loop latency
# Logs go to $OUT (default /tmp/krung-gpu); run from the repository's root.
set -uo pipefail
OUT=${OUT:-/tmp/krung-gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
part=${1:-tests}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
pytest() { python3 -m pytest -m gpu -p no:cacheprovider -rs --durations=15 "$@"; }
case "$part" in
  tests)
    pytest tests/test_gpu.py tests/test_builtin_problems.py tests/test_kernelbench.py \
      tests/test_gpumode.py tests/test_red_team.py tests/test_scale.py -s 2>&1 | tee "$OUT/tests.log" ;;
  inspect)
    pytest tests/test_gpu_profile_trace.py tests/test_gpu_roofline.py -s 2>&1 | tee "$OUT/inspect.log" ;;
  bench)
    { python3 benchmarks/profiler_start.py
      python3 benchmarks/timing_accuracy.py --ncu
      python3 benchmarks/loop_latency.py --device cuda --warm 3; } 2>&1 | tee "$OUT/bench.log" ;;
  *) echo "unknown part $part: tests, inspect or bench" >&2; exit 2 ;;
esac
