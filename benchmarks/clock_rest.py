"""How long a compute-bound kernel's figure takes to come back after heavy work, and whether
NVML says when.

A bf16 matmul's time follows the SM clock, and the clock follows the power the board drew
over the last moments: measured right after other heavy work (the reference's round, the
previous bench case), the same kernel times several % slower than after a rest. For each
workload this heats the board with `--heat` seconds of back-to-back calls, rests r seconds
while polling NVML every 50 ms, then takes one `krung.worker.timing.measure` as the benchmark rung
does (its plan, 2 input sets). It prints the median, the SM clock during the samples (from
krung's markers), NVML's clock, power and cap at the end of the rest, and when in the rest
NVML first showed the board at its top clock and not capped.

    python benchmarks/clock_rest.py [--heat 0.5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from krung.judge.device import clock_state
from krung.judge.rungs.benchmark import GPU_PLAN
from krung.worker.timing import measure

RESTS_S = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
POLL_S = 0.05


def workloads() -> dict[str, list[Callable[[], object]]]:
    def matmul(n: int) -> Callable[[], object]:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        return lambda: a @ b

    def add(n: int) -> Callable[[], object]:
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        return lambda: torch.add(x, y)

    return {"matmul 4096^3 bf16": [matmul(4096), matmul(4096)],
            "add 2^24 fp32": [add(1 << 24), add(1 << 24)]}


def heat(calls: list[Callable[[], object]], seconds: float) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for call in calls:
            call()
        torch.cuda.synchronize()


def rest(seconds: float) -> tuple[dict | None, float | None]:
    """Sleep, polling NVML; the last reading, and when the board first read as rested."""
    start = time.perf_counter()
    rested_at = None
    state = clock_state()
    while time.perf_counter() - start < seconds:
        time.sleep(POLL_S)
        state = clock_state()
        if rested_at is None and state and not state["power_capped"] and \
                state["sm_mhz"] >= state["sm_max_mhz"]:
            rested_at = time.perf_counter() - start
    return state, rested_at


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--heat", type=float, default=0.5, help="seconds of heavy work first")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"clock rest on {torch.cuda.get_device_name()}, {args.heat} s of heat before each, "
          f"{args.repeats} repeats")
    for name, calls in workloads().items():
        rows: dict[float, list[tuple]] = {r: [] for r in RESTS_S}
        for _ in range(args.repeats):
            for seconds in RESTS_S:
                heat(calls, args.heat)
                state, rested_at = rest(seconds)
                samples = measure(lambda i, c=calls: c[i](), len(calls), "cuda", GPU_PLAN)
                rows[seconds].append((statistics.median(samples.device_us), samples.sm_mhz,
                                      state, rested_at))
        print(f"\n{name}")
        print(f"{'rest s':>6} {'median us (each repeat)':>30} {'marker MHz':>18} "
              f"{'NVML MHz, W, capped':>26} {'rested by s':>12}")
        for seconds, got in rows.items():
            medians = " ".join(f"{m:8.2f}" for m, *_ in got)
            clocks = " ".join(f"{c:5.0f}" if c else "    -" for _, c, *_ in got)
            nvml = "; ".join(f"{s['sm_mhz']} {s['power_w']:.0f}{' cap' if s['power_capped'] else ''}"
                             if s else "-" for *_, s, _ in got)
            rested = " ".join(f"{r:.2f}" if r is not None else "-" for *_, r in got)
            print(f"{seconds:>6} {medians:>30} {clocks:>18} {nvml:>26} {rested:>12}")


if __name__ == "__main__":
    main()
