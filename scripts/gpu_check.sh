#!/usr/bin/env bash
# What only a GPU can check, in parts that each fit one 10-minute device call:
#   scripts/gpu_check.sh gate      the GPU gate (scripts/gpu_gate.py): the `gpu` tests, the
#                                  corpus through the default ladder cold and warm (0 krung
#                                  crashes), `krung suite` over 20 KernelBench level-1
#                                  problems at declared sizes; one line in GPU_GATE.md.
#                                  Every change to a GPU path passes it before it lands.
#                                  Tests its limit cut short (killed, or not started: a slower
#                                  machine) and corpus runs not started are "not finished",
#                                  named in $OUT/gate-rest.txt:
#                                  such a gate is completed by `gate-rest` in the next call on
#                                  the same commit, and only then counts as passed.
#   scripts/gpu_check.sh gate-rest what a gate did not finish (.gpu/gate-rest.txt, its
#                                  $OUT/gate-rest.txt carried), each with the whole limit
#                                  ($LIMIT, 540 s); its own line in GPU_GATE.md
#   scripts/gpu_check.sh gate-tests  the gate's parts alone: its tests; its corpus and suite
#   scripts/gpu_check.sh gate-runs   (to look at one part again without the rest)
#   scripts/gpu_check.sh ladder    the `gpu` tests of the ladder and the built-in problems
#   scripts/gpu_check.sh verify    what changed on GPU paths and has not run on the H200 yet:
#                                  delegation (CUPTI names), the sandbox's walls
#                                  (KRUNG_SANDBOX=on), the version's thread (CUPTI still sees
#                                  its kernels), caught kernel errors, persisting L2, timing,
#                                  CUDA graphs and batching (red team)
#   scripts/gpu_check.sh formats   KernelBench, GPU MODE, red team, executors on one GPU
#   scripts/gpu_check.sh inspect   artifacts, profile, trace, calibration, roofline
#   scripts/gpu_check.sh dsls      every DSL's example; CuTeDSL/TileLang from the wheels
#                                  carried into .whl (installed into .whl/site on first use)
#   scripts/gpu_check.sh bench     idle gap, profiler start, timing accuracy (with ncu),
#                                  timing spread, loop latency
#   scripts/gpu_check.sh latency   issue 18's turn of the loop: the default ladder and with the
#                                  profile, cold and warm; the profile rung's steps
#   scripts/gpu_check.sh suite     `krung suite` over KernelBench level 1 (first $SUITE_N, 30)
#                                  with their honest baselines: problems per minute
#   scripts/gpu_check.sh sets      KernelBench levels 1-3 and GPU MODE at their declared sizes
#                                  (benchmarks/problem_sets.py; the packed sets in $SETS)
#   scripts/gpu_check.sh PART-bg   any part detached from the call (setsid), so that it goes
#                                  on between calls on a warm machine (`sets-bg`, `suite-bg`
#                                  with SUITE_N=100): the first call starts it from a copy of
#                                  the checkout, every call waits until it ends or $WAIT
#                                  seconds (540) from the call's start pass, and brings back its
#                                  $OUT and log so far;
#                                  call again within the machine's idle time (30 s) to keep it
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
  gate) python3 scripts/gpu_gate.py --sets "${SETS:-.gpu/problem_sets.tar.gz}" --out "$OUT" \
          --suite "${SUITE_N:-20}" 2>&1 | tee "$OUT/gate.log" ;;
  gate-rest)
    if [ ! -s .gpu/gate-rest.txt ]; then
      echo "gate-rest needs .gpu/gate-rest.txt: the gate-rest.txt a gate brought back" >&2; exit 2
    fi
    python3 scripts/gpu_gate.py --rest .gpu/gate-rest.txt --out "$OUT" --limit "${LIMIT:-540}" \
      2>&1 | tee "$OUT/gate.log" ;;
  # One part of the gate at a time.
  gate-tests) python3 scripts/gpu_gate.py --out "$OUT" --parts tests --limit "${LIMIT:-540}" \
          2>&1 | tee "$OUT/gate.log" ;;
  gate-runs) python3 scripts/gpu_gate.py --sets "${SETS:-.gpu/problem_sets.tar.gz}" --out "$OUT" \
          --parts corpus,suite --suite "${SUITE_N:-20}" 2>&1 | tee "$OUT/gate.log" ;;
  ladder) gpu_tests tests/test_gpu.py tests/test_builtin_problems.py 2>&1 | tee "$OUT/ladder.log" ;;
  verify) gpu_tests tests/test_timing.py tests/test_delegation.py tests/test_gpu_persisting_l2.py \
            tests/test_red_team.py tests/test_gpu_red_team.py tests/test_sandbox.py 2>&1 \
            | tee "$OUT/verify.log"
    python3 benchmarks/version_thread.py --device cuda --repeats 5 2>&1 | tee -a "$OUT/verify.log" ;;
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
  latency)
    ladder=static,compile,run,correctness,determinism,benchmark,artifacts,roofline
    { python3 benchmarks/loop_latency.py --device cuda --rungs "$ladder" --turns 5
      python3 benchmarks/loop_latency.py --device cuda --rungs "$ladder,profile" --turns 3
      python3 benchmarks/profile_rung.py --turns 2; } 2>&1 | tee "$OUT/latency.log" ;;
  suite)
    # The problems unchanged; each baseline is the problem's own source with ModelNew = Model.
    scratch=$(mktemp -d)
    tar xzf "${SETS:-.gpu/problem_sets.tar.gz}" -C "$scratch" KernelBench/KernelBench/level1
    mkdir "$scratch/problems" "$scratch/baselines"
    for f in $(ls "$scratch"/KernelBench/KernelBench/level1/*.py | sort -V | head -"${SUITE_N:-30}"); do
      cp "$f" "$scratch/problems/"
      { cat "$f"; printf '\nModelNew = Model\n'; } > "$scratch/baselines/$(basename "$f")"
    done
    start=$(date +%s.%N)
    python3 -m krung suite "$scratch/problems" --solutions "$scratch/baselines" --gpus all \
      --per-gpu "${PER_GPU:-3}" --rungs static,compile,run,correctness,benchmark --json \
      --store "$scratch/krung.db" > "$OUT/suite.json" \
      2> >(while IFS= read -r line; do echo "${EPOCHREALTIME} $line"; done > "$OUT/suite.err")
    code=$?
    python3 - "$OUT/suite.json" "$start" "$(date +%s.%N)" "$code" "$scratch/krung.db" <<'PY' \
      | tee "$OUT/suite.log"
import collections, json, sqlite3, sys
suite = json.load(open(sys.argv[1]))
minutes = (float(sys.argv[3]) - float(sys.argv[2])) / 60
n = len(suite["problems"])
print(f"krung suite exit {sys.argv[4]}: {n} problems in {minutes:.2f} min = {n / minutes:.1f}/min")
print(json.dumps(suite["scores"]))
for p in suite["problems"]:
    if not p.get("correct"):
        print("not correct:", p["problem"], p.get("verdict"), "-", p.get("reason"))
# What the summary hides: runs krung's judge failed first (tried again in fresh processes),
# and problems the suite ran again (alone, after running out of memory beside others).
runs = sqlite3.connect(sys.argv[5]).execute("SELECT problem, env FROM runs").fetchall()
for problem, count in collections.Counter(p for p, _ in runs).items():
    if count > 1:
        print(f"ran {count} times: {problem}")
for problem, env in runs:
    first = json.loads(env).get("first_try")
    if first:
        print(f"judge failed first: {problem}: {first.get('error', '')[:300]}")
# A judge handed out while it still started costs its run torch's import and CUDA's start
from krung.host import service
handed = [state for _, state in service.handed_out(sys.argv[5])]
print(f"judges handed out by the service: {handed.count('ready')} ready, "
      f"{handed.count('starting')} still starting" if handed
      else "no judges handed out by a service"
      if (service.paths(sys.argv[5])[2] / "service.log").exists() else "no service log")
PY
    ;;
  sets)
    # The whole sets take several calls, over sessions: copy the sets.json a call brought
    # back to benchmarks/problem_sets.json and commit it (a new checkout has no .gpu/), and
    # the next call goes on from it; none starts a problem after STOP_AFTER seconds. SETS_ARGS is split on spaces (no quotes inside it); a --rerun
    # regex goes in SETS_RERUN, whole. The table is the H200's: on one, the rows other cards
    # measured run again after the rest (SETS_CARD, a regex over nvidia-smi's name).
    resume=""
    rows=benchmarks/problem_sets.json
    if [ -f "$rows" ]; then cp "$rows" "$OUT/sets.json"; resume=--resume; fi
    python3 benchmarks/problem_sets.py run "${SETS:-.gpu/problem_sets.tar.gz}" --device cuda \
      --jobs "${JOBS:-2}" --timeout "${TIMEOUT:-300}" --out "$OUT/sets.json" --markdown "$OUT/sets.md" \
      --stop-after "${STOP_AFTER:-420}" $resume ${SETS_ARGS:-} \
      --prefer-card "${SETS_CARD:-H200}" ${SETS_RERUN:+--rerun "$SETS_RERUN"} 2>&1 \
      | tee "$OUT/sets.log" ;;
  *-bg)
    inner=${part%-bg}
    run=/tmp/krung-$inner
    if [ ! -d "$run" ]; then  # the first call on this machine (sets: from the rows committed)
      # What the parts need, not the whole tree with whatever earlier parts left in it
      mkdir -p "$run/out" "$run/krung" &&
        cp -r src scripts benchmarks problems pyproject.toml .gpu "$run/krung/"
      (cd "$run/krung" && setsid nohup env OUT="$run/out" STOP_AFTER=0 \
         sh -c 'scripts/gpu_check.sh "$1"; echo $? > "$2"' _ "$inner" "$run/rc" \
         > "$run/run.log" 2>&1 < /dev/null &)
    fi
    # $WAIT counts from the call's start (bash's SECONDS), the part's own start included, so
    # a call given WAIT plus a few seconds to copy ends before the device tool's limit.
    while [ ! -f "$run/rc" ] && [ "$SECONDS" -lt "${WAIT:-540}" ]; do sleep 2; done
    cp -r "$run/out/." "$OUT/" 2>/dev/null; cp "$run/run.log" "$OUT/"
    if [ -f "$run/rc" ]; then echo "$inner ended: exit $(cat "$run/rc")"; else echo "$inner still running"; fi
    grep -c '^\[' "$run/run.log"; tail -3 "$run/run.log" ;;
  *) echo "unknown part $part: gate, gate-rest, gate-tests, gate-runs, ladder, verify, formats, inspect, dsls, bench, latency, suite, sets, or any part with -bg" >&2; exit 2 ;;
esac
