"""The timing protocol: one function, the same for the version and for the reference.

On a GPU: CUDA events around each call, the L2 cache flushed before every sample by writing
a buffer twice its size, warm-up first, then samples until a time budget or a sample cap is
reached; the figure is the median. On a CPU: the host's monotonic clock around each call,
the same statistics, labelled `cpu-wall`. Every figure carries the method it was taken with.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TimingPlan:
    warmup_s: float = 0.05
    budget_s: float = 0.5  # time spent sampling, after warm-up
    min_samples: int = 5
    max_samples: int = 500


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    cv: float  # standard deviation over mean
    samples: int
    clock: str  # "cuda-events" or "cpu-wall"
    warmup_calls: int
    l2_flush_bytes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def time_call(fn: Callable[[], Any], device: str, plan: TimingPlan | None = None) -> Timing:
    plan = plan or TimingPlan()
    if device.startswith("cuda"):
        return _time_cuda(fn, plan)
    return _time_cpu(fn, plan)


def summarise(samples_us: list[float], **method: Any) -> Timing:
    ordered = sorted(samples_us)
    mean = statistics.fmean(ordered)
    spread = statistics.pstdev(ordered) if len(ordered) > 1 else 0.0
    return Timing(
        median_us=statistics.median(ordered),
        p10_us=_quantile(ordered, 0.10),
        p90_us=_quantile(ordered, 0.90),
        mean_us=mean,
        cv=spread / mean if mean > 0 else 0.0,
        samples=len(ordered),
        **method,
    )


def _quantile(ordered: list[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _time_cpu(fn: Callable[[], Any], plan: TimingPlan) -> Timing:
    clock = time.perf_counter
    start = clock()
    warmup_calls = 0
    while warmup_calls == 0 or clock() - start < plan.warmup_s:
        fn()
        warmup_calls += 1
    samples: list[float] = []
    begin = clock()
    while len(samples) < plan.max_samples and (
            len(samples) < plan.min_samples or clock() - begin < plan.budget_s):
        t0 = clock()
        fn()
        samples.append((clock() - t0) * 1e6)
    return summarise(samples, clock="cpu-wall", warmup_calls=warmup_calls, l2_flush_bytes=0)


def _time_cuda(fn: Callable[[], Any], plan: TimingPlan) -> Timing:
    import torch

    device = torch.cuda.current_device()
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    flush = torch.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=torch.int32, device="cuda")

    # Warm-up: compile, autotune and load everything; estimate one call's time.
    torch.cuda.synchronize()
    start = time.perf_counter()
    warmup_calls = 0
    while warmup_calls < 2 or time.perf_counter() - start < plan.warmup_s:
        fn()
        torch.cuda.synchronize()
        warmup_calls += 1
    per_call_s = (time.perf_counter() - start) / warmup_calls
    count = int(min(plan.max_samples, max(plan.min_samples, plan.budget_s / max(per_call_s, 1e-6))))

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for begin, end in zip(starts, ends, strict=True):
        flush.zero_()  # evict the previous call's data from L2
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    samples = [b.elapsed_time(e) * 1e3 for b, e in zip(starts, ends, strict=True)]
    return summarise(samples, clock="cuda-events", warmup_calls=warmup_calls,
                     l2_flush_bytes=flush.numel() * 4)
