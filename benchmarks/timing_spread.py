"""Which central figure of krung's samples is steadiest across fresh processes, and what
keeps a compute-bound kernel's figure steady.

CUPTI's kernel durations on the H200 come in steps of about 32 ns, so the median of a 1.3 µs
kernel's samples can only move by 2.5% at a time, and it flips between steps from one process
to the next. A bf16 matmul's time follows the SM clock, which drops by several % once heavy
work before it (the reference's round, another case) has drawn the board toward its power
cap. This runs `krung.worker.timing.measure` in several fresh processes per workload: on one input
set first thing (a rested board), then on as many sets as the rung would use after 0.3 s of
back-to-back calls (as the version's round follows the reference's). Per process it prints the median,
krung's stepped median (interpolated within the timer's step), the mean and the
interquartile mean (the mean of the middle half, which steps do not quantise and outliers do
not move), the SM clock during the samples (from krung's markers) and NVML's after; then each
figure's spread (CV) across the processes. `--save` keeps every sample.

    python benchmarks/timing_spread.py [--processes 8] [--save samples.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from krung.judge.device import clock_state
from krung.judge.rungs.benchmark import GPU_PLAN, input_set_count  # what the benchmark rung uses
from krung.worker.timing import measure, stepped_median

STATISTICS = ("median", "stepped", "mean", "iqm")
HEAT_S = 0.3  # back-to-back calls before an arrangement, as the reference's round would be
Build = Callable[[], tuple[Callable[[], object], int]]  # a call on fresh inputs, their bytes


def workloads() -> dict[str, Build]:
    def add(n: int) -> Build:
        def build():
            x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            return (lambda: torch.add(x, y)), 2 * x.nbytes
        return build

    def matmul(n: int) -> Build:
        def build():
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            return (lambda: a @ b), 2 * a.nbytes
        return build

    return {"add 2^12 fp32": add(1 << 12), "add 2^20 fp32": add(1 << 20),
            "matmul 4096^3 bf16": matmul(4096)}


def rung_sets(nbytes: int) -> int:
    return input_set_count(nbytes, torch.cuda.get_device_properties(0).L2_cache_size)


def interquartile_mean(samples: list[float]) -> float:
    ordered = sorted(samples)
    quarter = len(ordered) // 4
    return statistics.fmean(ordered[quarter:len(ordered) - quarter])


def heat(calls: list[Callable[[], object]]) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < HEAT_S:
        for call in calls:
            call()
        torch.cuda.synchronize()


def figures(calls: list[Callable[[], object]]) -> dict[str, float]:
    taken = measure(lambda i: calls[i](), len(calls), "cuda", GPU_PLAN)
    samples = taken.device_us
    return {"median": statistics.median(samples), "stepped": stepped_median(samples),
            "mean": statistics.fmean(samples),
            "iqm": interquartile_mean(samples), "samples": len(samples),
            "marker_mhz": taken.sm_mhz, "sm_mhz": (clock_state() or {}).get("sm_mhz"),
            "raw_us": samples}


def one_process() -> dict[str, dict[str, dict[str, float]]]:
    out = {}
    for name, build in workloads().items():
        first, nbytes = build()
        rotated = [first] + [build()[0] for _ in range(rung_sets(nbytes) - 1)]
        out[name] = {"1 set": figures([first])}
        heat(rotated)
        out[name][f"{len(rotated)} sets, after heat"] = figures(rotated)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--save", help="write every process's samples to this JSON file")
    parser.add_argument("--one-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_process:
        print(json.dumps(one_process()))
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    runs = []
    for _ in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--one-process"], capture_output=True,
                              text=True, env=env)
        if done.returncode:
            sys.exit(f"a measuring process failed:\n{done.stderr[-4000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    if args.save:
        with open(args.save, "w") as out:
            json.dump(runs, out)
    print(f"timing spread on {torch.cuda.get_device_name()}, {args.processes} fresh processes")
    for name, arrangements in runs[0].items():
        for arrangement in arrangements:
            print(f"\n{name}, {arrangement}")
            print(f"{'process':>7} {'median us':>10} {'stepped us':>10} {'mean us':>10} "
                  f"{'iqm us':>10} "
                  f"{'samples':>8} {'SM MHz':>7} {'NVML after':>10}")
            rows = [run[name][arrangement] for run in runs]
            for number, row in enumerate(rows, 1):
                print(f"{number:>7} {row['median']:>10.3f} {row['stepped']:>10.3f} "
                      f"{row['mean']:>10.3f} "
                      f"{row['iqm']:>10.3f} {row['samples']:>8} {row['marker_mhz'] or '-':>7} "
                      f"{row['sm_mhz'] or '-':>10}")
            spreads = []
            for stat in STATISTICS:
                values = [row[stat] for row in rows]
                cv = statistics.pstdev(values) / statistics.fmean(values)
                spreads.append(f"{stat} {100 * cv:.2f}%")
            print("CV across processes: " + ", ".join(spreads))


if __name__ == "__main__":
    main()
