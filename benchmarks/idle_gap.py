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

from krung.device import clock_state
from krung.timing import SPIN_KERNEL, device_work

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


def arrangements(flush: torch.Tensor) -> dict[str, Callable[[Callable[[], object], int], None]]:
    """name -> run(fn, calls): each issues `calls` calls of fn in one arrangement."""
    sync, spin = torch.cuda.synchronize, torch.cuda._sleep

    def isolated(fn, calls):  # timing_accuracy's truth
        for _ in range(calls):
            flush.zero_()
            spin(1)
            sync()
            fn()
            sync()

    def isolated_probed(fn, calls):
        for _ in range(calls):
            flush.zero_()
            sync()
            spin(PROBE_CYCLES)
            fn()
            spin(PROBE_CYCLES)
            sync()

    def queued(fn, calls):  # isolated, but launched while the GPU is busy: no idle before it
        for _ in range(calls):
            flush.zero_()
            sync()
            spin(QUEUE_CYCLES)
            spin(PROBE_CYCLES)
            fn()
            spin(PROBE_CYCLES)
            sync()

    def back_to_back(fn, calls):  # krung's loop
        for _ in range(calls):
            flush.zero_()
            spin(1)
            fn()
        sync()

    def back_to_back_probed(fn, calls):
        for _ in range(calls):
            flush.zero_()
            spin(PROBE_CYCLES)
            fn()
            spin(PROBE_CYCLES)
        sync()

    def warm_back_to_back(fn, calls):  # no flush: L2 keeps what the last call left
        for _ in range(calls):
            fn()
        sync()

    return {"isolated (truth)": isolated, "isolated, probed": isolated_probed,
            "queued behind a spin": queued, "back to back (krung)": back_to_back,
            "back to back, probed": back_to_back_probed, "back to back, warm L2": warm_back_to_back}


def kernel_names(fn: Callable[[], object]) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name() for e in device_work(prof)}


def measure(fn: Callable[[], object], run: Callable, calls: int,
            names: set[str]) -> tuple[list[float], list[float]]:
    """fn's device time per call (us), and the SM clock (MHz) each probe saw."""
    from torch.profiler import ProfilerActivity, profile

    run(fn, 3)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(fn, calls)
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
        for arrangement, run in arrangements(flush).items():
            per_call, probes = measure(fn, run, args.calls, names)
            deciles = statistics.quantiles(per_call, n=10) if len(per_call) > 1 else per_call
            clock = f"{statistics.median(probes):.0f}" if probes else "-"
            state = clock_state() or {}
            nvml = f"{state.get('sm_mhz', '-')} {','.join(state.get('reasons', []))}"
            print(f"{name:<20} {arrangement:<22} {statistics.median(per_call):>10.2f} "
                  f"{deciles[0]:>9.2f} {deciles[-1]:>9.2f} {clock:>10} {nvml:>22}", flush=True)


if __name__ == "__main__":
    main()
