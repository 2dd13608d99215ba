"""Which central figure of krung's samples is steadiest across fresh processes.

CUPTI's kernel durations on the H200 come in steps of about 32 ns, so the median of a 1.3 µs
kernel's samples can only move by 2.5% at a time, and it flips between steps from one process
to the next. This runs `krung.timing.measure` in several fresh processes per workload and
prints, per process, the median, the mean, and the interquartile mean (the mean of the
middle half, which steps do not quantise and outliers do not move), the SM clock after, and
each statistic's spread (CV) across the processes.

    python benchmarks/timing_spread.py [--processes 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable

import torch

from krung.device import clock_state
from krung.rungs.benchmark import GPU_PLAN  # the plan the benchmark rung times with
from krung.timing import measure

STATISTICS = ("median", "mean", "iqm")


def workloads() -> dict[str, Callable[[], Callable[[], object]]]:
    def add(n: int):
        def build():
            x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            return lambda: torch.add(x, y)
        return build

    def matmul(n: int):
        def build():
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            return lambda: a @ b
        return build

    return {"add 2^12 fp32": add(1 << 12), "add 2^20 fp32": add(1 << 20),
            "matmul 4096^3 bf16": matmul(4096)}


def interquartile_mean(samples: list[float]) -> float:
    ordered = sorted(samples)
    quarter = len(ordered) // 4
    return statistics.fmean(ordered[quarter:len(ordered) - quarter])


def samples_of(call: Callable[[], object]) -> list[float]:
    return measure(lambda _i: call(), 1, "cuda", GPU_PLAN).device_us


def one_process() -> dict[str, dict[str, float]]:
    figures = {}
    for name, build in workloads().items():
        samples = samples_of(build())
        clock = clock_state() or {}
        figures[name] = {"median": statistics.median(samples), "mean": statistics.fmean(samples),
                         "iqm": interquartile_mean(samples), "samples": len(samples),
                         "sm_mhz": clock.get("sm_mhz")}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=8)
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
    print(f"timing spread on {torch.cuda.get_device_name()}, {args.processes} fresh processes")
    for name in runs[0]:
        print(f"\n{name}")
        print(f"{'process':>7} {'median us':>10} {'mean us':>10} {'iqm us':>10} {'samples':>8} "
              f"{'SM MHz':>7}")
        for number, run in enumerate(runs, 1):
            row = run[name]
            print(f"{number:>7} {row['median']:>10.3f} {row['mean']:>10.3f} {row['iqm']:>10.3f} "
                  f"{row['samples']:>8} {row['sm_mhz'] or '-':>7}")
        spreads = []
        for stat in STATISTICS:
            values = [run[name][stat] for run in runs]
            spreads.append(f"{stat} {100 * statistics.pstdev(values) / statistics.fmean(values):.2f}%")
        print("CV across processes: " + ", ".join(spreads))


if __name__ == "__main__":
    main()
