"""How close krung's timings are to the device's own kernel time, beside the usual methods.

Needs a CUDA GPU. For each workload it prints:
- truth: CUPTI kernel time of one call with a cold L2, each call isolated by synchronisation
  (stepped median of 100; summed over the call's kernels);
- krung: the figure the benchmark rung reports (`krung.worker.timing.measure` with the rung's plan,
  rotating over as many input sets as the rung would, the stepped median);
- do_bench and do_bench_cudagraph (Triton, median), a KernelBench-style event loop with an L2
  flush, and ncu's gpu__time_duration (with --ncu);
each with its error against the truth; then krung's spread over 5 fresh processes (CV of their
medians), its wall time per measurement, and the SM clock the truth's and krung's calls ran at
(a compute-bound kernel's time follows it). For the workloads under 10 µs, each process's
median and the commonest sample values: whether the spread across processes is the median
flipping between steps of the timer.

    python benchmarks/timing_accuracy.py [--ncu] [--processes 5]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import torch

from krung.judge.rungs.benchmark import GPU_PLAN, input_set_count
from krung.worker.timing import (
    CLOCK_SPIN_CYCLES,
    SPIN_KERNEL,
    device_work,
    measure,
    spin_clock_mhz,
    stepped_median,
    summarise,
)


def workloads() -> dict[str, Callable[[], Callable[[], object]]]:
    """name -> a builder returning the call to time (inputs made once, fresh random values)."""

    def add(n: int):
        def build():
            a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            return lambda: torch.add(a, b)
        return build

    def softmax(rows: int, cols: int):
        def build():
            x = torch.randn(rows, cols, device="cuda")
            return lambda: torch.softmax(x, dim=-1)
        return build

    def matmul(m: int, n: int, k: int, dtype: torch.dtype):
        def build():
            torch.backends.cuda.matmul.allow_tf32 = False
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            return lambda: a @ b
        return build

    def chain(launches: int, n: int):
        def build():
            x = torch.randn(n, device="cuda")

            def call():
                y = x
                for _ in range(launches):
                    y = y + 1.0
                return y
            return call
        return build

    return {
        "add 2^12 fp32": add(1 << 12),
        "add 2^20 fp32 (fits L2)": add(1 << 20),
        "add 2^22 fp32": add(1 << 22),
        "softmax 4096x4096 fp32": softmax(4096, 4096),
        "matmul 4096^3 bf16": matmul(4096, 4096, 4096, torch.bfloat16),
        "add 2^27 fp32": add(1 << 27),
        "matmul 5120^3 fp32": matmul(5120, 5120, 5120, torch.float32),
        "32 dependent adds 2^12": chain(32, 1 << 12),
    }


def truth_us(fn: Callable[[], object], flush: torch.Tensor, calls: int = 100
             ) -> tuple[float, float | None]:
    """CUPTI device time of isolated cold-L2 calls: the reference figure (the stepped median,
    as krung's), and the SM clock they ran at (krung's two marker lengths)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for call in range(calls):
            flush.zero_()
            torch.cuda._sleep(1 + CLOCK_SPIN_CYCLES * (call % 2))
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
    records = device_work(prof)
    marks = [i for i, e in enumerate(records) if SPIN_KERNEL in e.name()]
    per_call = []
    spins: tuple[list[float], list[float]] = ([], [])
    for n, mark in enumerate(marks):
        stop = marks[n + 1] - 1 if n + 1 < len(marks) else len(records)
        per_call.append(sum(e.duration_ns() for e in records[mark + 1:stop]) / 1e3)
        spins[n % 2].append(records[mark].duration_ns() / 1e3)
    return stepped_median(per_call), spin_clock_mhz(*spins)


def events_loop_us(fn: Callable[[], object], flush: torch.Tensor, iters: int = 100) -> float:
    """KernelBench-style: flush, event, call, event; median."""
    times = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def krung_us(build: Callable[[], Callable[[], object]]
             ) -> tuple[float, float, str, list[float], int, float | None]:
    """krung's figure as the benchmark rung takes it: its plan, and as many input sets as it
    would rotate over (each `build()` makes fresh inputs)."""
    before = torch.cuda.memory_allocated()
    calls = [build()]
    set_bytes = torch.cuda.memory_allocated() - before
    sets = input_set_count(set_bytes, torch.cuda.get_device_properties(0).L2_cache_size)
    calls += [build() for _ in range(sets - 1)]
    samples = measure(lambda i: calls[i](), sets, "cuda", GPU_PLAN)
    return (summarise(samples.device_us)["median_us"], samples.wall_s, samples.mode,
            samples.device_us, sets, samples.sm_mhz)


def one_process(names: list[str]) -> dict[str, list[float]]:
    """krung's figure and wall time per workload, in this (fresh) process."""
    builders = workloads()
    return {name: list(krung_us(builders[name])[:2]) for name in names}


def commonest(samples: list[float], top: int = 4) -> str:
    """The most frequent sample values and their shares: whether CUPTI's durations come in
    steps (a median that flips between two steps spreads across processes)."""
    counts = Counter(round(s * 1e3) for s in samples)
    return ", ".join(f"{ns} ns {100 * n / len(samples):.0f}%" for ns, n in counts.most_common(top))


def ncu_us(names: list[str]) -> dict[str, float]:
    """ncu's gpu__time_duration per workload (summed over each call's kernels; median)."""
    ncu = shutil.which("ncu")
    if not ncu:
        return {}
    command = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
               "--nvtx", "--print-nvtx-rename", "kernel", sys.executable, __file__,
               "--ncu-target"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    rows = list(csv.DictReader(io.StringIO(done.stdout[done.stdout.find('"ID"'):])))
    per_call: dict[tuple[str, str], float] = {}
    for row in rows:
        # --print-nvtx-rename kernel: a kernel inside a range is named after the range.
        key = row.get("Kernel Name", "")
        if "|" not in key or row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "nsecond")
        value = float(row["Metric Value"].replace(",", ""))
        value_us = value / 1e3 if unit.startswith("n") else value * (1e3 if unit.startswith(
            "m") else 1.0)
        name, call = key.rsplit("|", 1)
        per_call[(name, call)] = per_call.get((name, call), 0.0) + value_us
    found: dict[str, list[float]] = {}
    for (name, _call), value in per_call.items():
        found.setdefault(name, []).append(value)
    return {name: statistics.median(values) for name, values in found.items() if name in names}


def ncu_target() -> None:
    """What ncu profiles: each workload called 5 times, each call in its own NVTX range."""
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4,
                        dtype=torch.int32, device="cuda")
    for name, build in workloads().items():
        fn = build()
        fn()
        torch.cuda.synchronize()
        for call in range(5):
            flush.zero_()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(f"{name}|{call}")
            fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ncu", action="store_true", help="also run ncu (slow)")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--one-process", help=argparse.SUPPRESS)
    parser.add_argument("--ncu-target", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ncu_target:
        return ncu_target()
    names = list(workloads())
    if args.one_process:
        print(json.dumps(one_process(json.loads(args.one_process))))
        return None

    import triton.testing

    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4,
                        dtype=torch.int32, device="cuda")
    table = {}
    for name, build in workloads().items():
        krung_median, wall, mode, samples, sets, krung_mhz = krung_us(build)
        fn = build()
        truth, truth_mhz = truth_us(fn, flush)
        table[name] = {
            "truth": truth, "clocks": (truth_mhz, krung_mhz),
            "krung": krung_median,
            "do_bench": triton.testing.do_bench(fn, return_mode="median") * 1e3,
            "cudagraph": triton.testing.do_bench_cudagraph(fn, return_mode="median") * 1e3,
            "events": events_loop_us(fn, flush),
            "wall_s": wall, "mode": mode, "samples": samples, "sets": sets,
        }
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    medians: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--one-process", json.dumps(names)],
                              capture_output=True, text=True, env=env, check=True)
        for name, (median, _wall) in json.loads(done.stdout.strip().splitlines()[-1]).items():
            medians[name].append(median)

    device = torch.cuda.get_device_name()
    print(f"timing accuracy on {device}, torch {torch.__version__}, errors against CUPTI truth")
    methods = ["krung", "do_bench", "cudagraph", "events"]
    header = f"{'workload':<26} {'truth us':>9} " + " ".join(f"{m:>17}" for m in methods)
    print(header + f" {'krung CV/5 proc':>15} {'wall s':>7} {'sets':>4} {'MHz truth/krung':>15}"
          " mode")
    for name, row in table.items():
        cells = []
        for method in methods:
            value = row.get(method)
            if value is None:
                cells.append(f"{'-':>17}")
                continue
            error = 100 * (value - row["truth"]) / row["truth"]
            cells.append(f"{value:>9.2f} ({error:+5.1f}%)")
        spread = medians[name]
        cv = statistics.pstdev(spread) / statistics.fmean(spread) if len(spread) > 1 else 0.0
        clocks = "/".join(f"{mhz:.0f}" if mhz else "-" for mhz in row["clocks"])
        print(f"{name:<26} {row['truth']:>9.2f} " + " ".join(cells) +
              f" {100 * cv:>14.2f}% {row['wall_s']:>7.2f} {row['sets']:>4} {clocks:>15} "
              f"{row['mode']}", flush=True)
    print(f"\n{'workload':<26} {'krung medians per process, us':<40} commonest samples")
    for name, row in table.items():
        if row["truth"] < 10:  # where a step of the timer is a large share of the time
            spread = " ".join(f"{m:.3f}" for m in medians[name])
            print(f"{name:<26} {spread:<40} {commonest(row['samples'])}")
    if args.ncu:  # slow: printed after the main table, so a time limit keeps that
        print(f"\n{'workload':<26} {'truth us':>9} {'ncu gpu__time_duration':>24}")
        for name, value in ncu_us(names).items():
            error = 100 * (value - table[name]["truth"]) / table[name]["truth"]
            print(f"{name:<26} {table[name]['truth']:>9.2f} {value:>13.2f} ({error:+5.1f}%)")
    return None


if __name__ == "__main__":
    main()
