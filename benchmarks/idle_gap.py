"""Why an isolated call and a back-to-back call of one kernel differ: the idle gap test.

On the H200 the 4096^3 bf16 matmul took 183 us per CUPTI when each call was isolated by a
synchronisation, and 173 us back to back (krung's loop); memory-bound kernels agree within
0.5% (benchmarks/RESULTS.md). This measures one kernel's CUPTI time in several arrangements,
and the SM clock right before and after it: a spin kernel of a known cycle count
(`torch.cuda._sleep`) runs there, and cycles / its duration is the clock.

    python benchmarks/idle_gap.py [--calls 30]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch

from krung.judge.device import clock_state
from krung.worker.timing import SPIN_KERNEL, device_work

PROBE_CYCLES = 20_000  # about 10 us at 2 GHz
QUEUE_CYCLES = 400_000  # about 200 us: long enough to queue the next launch behind it


def workloads() -> dict[str, Callable[[], object]]:
    def matmul(n: int) -> Callable[[], object]:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        return lambda: a @ b

    x, y = torch.randn(1 << 22, device="cuda"), torch.randn(1 << 22, device="cuda")
    return {"matmul 4096^3 bf16": matmul(4096), "matmul 8192^3 bf16": matmul(8192),
            "add 2^22 fp32": lambda: torch.add(x, y)}


# Each arrangement is the steps of one call: flush (L2), mark (a 1-cycle spin, as krung's
# loop has between calls), sync, probe (a clock probe), queue (a long spin to launch behind),
# call (the workload).
ARRANGEMENTS = {
    "isolated (truth)": ("flush", "mark", "sync", "call", "sync"),  # timing_accuracy's truth
    "isolated, probed": ("flush", "sync", "probe", "call", "probe", "sync"),
    # isolated, but launched while the GPU is busy: no idle before it
    "queued behind a spin": ("flush", "sync", "queue", "probe", "call", "probe", "sync"),
    "back to back (krung)": ("flush", "mark", "call"),  # krung's loop
    "back to back, probed": ("flush", "probe", "call", "probe"),
    "back to back, warm L2": ("call",),  # no flush: L2 keeps what the last call left
}


def run(steps: tuple[str, ...], fn: Callable[[], object], flush: torch.Tensor,
        calls: int) -> None:
    """Issue `calls` calls of fn in one arrangement, then wait for them."""
    spin = torch.cuda._sleep
    actions = {"flush": flush.zero_, "mark": lambda: spin(1), "sync": torch.cuda.synchronize,
               "probe": lambda: spin(PROBE_CYCLES), "queue": lambda: spin(QUEUE_CYCLES),
               "call": fn}
    for _ in range(calls):
        for step in steps:
            actions[step]()
    torch.cuda.synchronize()


def kernel_names(fn: Callable[[], object]) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name() for e in device_work(prof)}


def measure(fn: Callable[[], object], steps: tuple[str, ...], flush: torch.Tensor, calls: int,
            names: set[str]) -> tuple[list[float], list[float]]:
    """fn's device time per call (us), and the SM clock (MHz) each probe saw."""
    from torch.profiler import ProfilerActivity, profile

    run(steps, fn, flush, 3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(steps, fn, flush, calls)
    records = device_work(prof)
    mine = [e.duration_ns() / 1e3 for e in records if e.name() in names]
    per = len(mine) // calls  # kernels per call, launched one after another
    per_call = [sum(mine[i * per:(i + 1) * per]) for i in range(calls)]
    spins = [e.duration_ns() / 1e3 for e in records if SPIN_KERNEL in e.name()]
    # The probes, not the 1-cycle markers or the long queueing spin: clocks 300-3000 MHz.
    probes = [PROBE_CYCLES / us for us in spins
              if PROBE_CYCLES / 3000 <= us <= PROBE_CYCLES / 300]
    return per_call, probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    print(f"idle gap on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{args.calls} calls each; clock from {PROBE_CYCLES}-cycle spins around the call")
    print(f"{'workload':<20} {'arrangement':<22} {'median us':>10} {'p10':>9} {'p90':>9} "
          f"{'clock MHz':>10} {'NVML after':>22}")
    for name, fn in workloads().items():
        names = kernel_names(fn)
        for arrangement, steps in ARRANGEMENTS.items():
            per_call, probes = measure(fn, steps, flush, args.calls, names)
            deciles = statistics.quantiles(per_call, n=10) if len(per_call) > 1 else per_call
            clock = f"{statistics.median(probes):.0f}" if probes else "-"
            state = clock_state() or {}
            nvml = f"{state.get('sm_mhz', '-')} {','.join(state.get('reasons', []))}"
            print(f"{name:<20} {arrangement:<22} {statistics.median(per_call):>10.2f} "
                  f"{deciles[0]:>9.2f} {deciles[-1]:>9.2f} {clock:>10} {nvml:>22}", flush=True)


if __name__ == "__main__":
    main()
