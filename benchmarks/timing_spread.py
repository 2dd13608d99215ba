"""Which central figure of krung's samples is steadiest across fresh processes.

CUPTI's kernel durations on the H200 come in steps of about 32 ns, so the median of a 1.3 µs
kernel's samples can only move by 2.5% at a time, and it flips between steps from one process
to the next; the timing benchmark (`timing_accuracy.py`) also times one input set, where the
benchmark rung rotates over several (2 to 8, together twice the L2), so where in memory one
tensor landed may weigh on its figure. This runs `krung.timing.measure` in several fresh
processes per workload, on one input set and on as many as the rung would use, and prints per
process the median, the mean and the interquartile mean (the mean of the middle half, which
steps do not quantise and outliers do not move) and the SM clock after; then each figure's
spread (CV) across the processes.

    python benchmarks/timing_spread.py [--processes 8]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable

import torch

from krung.device import clock_state
from krung.rungs.benchmark import GPU_PLAN, MAX_INPUT_SETS  # what the benchmark rung uses
from krung.timing import measure

STATISTICS = ("median", "mean", "iqm")
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
    """As many input sets as the benchmark rung would rotate over (`_input_sets`)."""
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    if nbytes >= l2_bytes:
        return 2
    return min(MAX_INPUT_SETS, max(2, math.ceil(2 * l2_bytes / nbytes)))


def interquartile_mean(samples: list[float]) -> float:
    ordered = sorted(samples)
    quarter = len(ordered) // 4
    return statistics.fmean(ordered[quarter:len(ordered) - quarter])


def figures(calls: list[Callable[[], object]]) -> dict[str, float]:
    samples = measure(lambda i: calls[i](), len(calls), "cuda", GPU_PLAN).device_us
    return {"median": statistics.median(samples), "mean": statistics.fmean(samples),
            "iqm": interquartile_mean(samples), "samples": len(samples),
            "sm_mhz": (clock_state() or {}).get("sm_mhz")}


def one_process() -> dict[str, dict[str, dict[str, float]]]:
    out = {}
    for name, build in workloads().items():
        first, nbytes = build()
        rotated = [first] + [build()[0] for _ in range(rung_sets(nbytes) - 1)]
        out[name] = {"1 set": figures([first]), f"{len(rotated)} sets": figures(rotated)}
    return out


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
    for name, arrangements in runs[0].items():
        for arrangement in arrangements:
            print(f"\n{name}, {arrangement}")
            print(f"{'process':>7} {'median us':>10} {'mean us':>10} {'iqm us':>10} "
                  f"{'samples':>8} {'SM MHz':>7}")
            rows = [run[name][arrangement] for run in runs]
            for number, row in enumerate(rows, 1):
                print(f"{number:>7} {row['median']:>10.3f} {row['mean']:>10.3f} "
                      f"{row['iqm']:>10.3f} {row['samples']:>8} {row['sm_mhz'] or '-':>7}")
            spreads = []
            for stat in STATISTICS:
                values = [row[stat] for row in rows]
                cv = statistics.pstdev(values) / statistics.fmean(values)
                spreads.append(f"{stat} {100 * cv:.2f}%")
            print("CV across processes: " + ", ".join(spreads))


if __name__ == "__main__":
    main()
