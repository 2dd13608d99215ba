"""What running the version in a thread of its own (krung.worker.guard.VersionThread) costs
the timing: the same tiny call timed by `krung.worker.timing.measure` called directly, as the
judge times the reference, and through the version's thread, as the worker times a version
(the timer's reads made in that thread, next to the call). Prints the median of each, in µs,
per workload, and the hand-over's own round trip. On a GPU (CUPTI) also the host-visible
median, which is where a hand-over inside the timed region would show.

    python benchmarks/version_thread.py [--device cpu|cuda] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from krung.worker.guard import VersionThread
from krung.worker.timing import TimingPlan, measure


class Through:
    """`call(i)` and `around(i, start, end)` as the worker's timed call offers them."""

    def __init__(self, site: VersionThread, fn, sets):
        self.site, self.fn, self.sets = site, fn, sets

    def __call__(self, i: int) -> None:
        self.site.run(self.fn, self.sets[i])

    def around(self, i: int, start, end) -> None:
        self.site.run(self.fn, self.sets[i], start, end)


def nothing() -> None:
    pass


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def direct_call(sets: list, i: int) -> None:
    scale(*sets[i])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = args.device
    if device == "cuda":
        torch.cuda.init()
    site = VersionThread()
    for _ in range(1000):
        site.run(nothing)
    start = time.perf_counter()
    for _ in range(10_000):
        site.run(nothing)
    print(f"hand-over round trip: {(time.perf_counter() - start) / 10_000 * 1e6:.1f} us")
    plan = TimingPlan(warmup_s=0.02, max_s=0.2, min_samples=50, max_samples=2000,
                      target_ci=0.003)
    print(f"{'workload':<22}{'direct_us':>11}{'thread_us':>11}{'direct_host':>13}"
          f"{'thread_host':>13}")
    for n in (1 << 10, 1 << 16, 1 << 22):
        sets = [(torch.randn(n, device=device),) for _ in range(4)]

        direct, thread, direct_host, thread_host = [], [], [], []
        for _ in range(args.repeats):
            a = measure(functools.partial(direct_call, sets), len(sets), device, plan)
            b = measure(Through(site, scale, sets), len(sets), device, plan)
            direct.append(statistics.median(a.device_us))
            thread.append(statistics.median(b.device_us))
            if a.host_us:
                direct_host.append(statistics.median(a.host_us))
                thread_host.append(statistics.median(b.host_us))
        host = (f"{statistics.median(direct_host):>13.2f}{statistics.median(thread_host):>13.2f}"
                if direct_host else f"{'-':>13}{'-':>13}")
        print(f"{'x*2+1 n=' + str(n):<22}{statistics.median(direct):>11.2f}"
              f"{statistics.median(thread):>11.2f}{host}")


if __name__ == "__main__":
    main()
