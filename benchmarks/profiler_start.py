"""What the first CUPTI measurement in a process costs, and what starting the profiler ahead
(`krung.worker.timing.start_profiler`, on the main thread, as the judge and worker do at their
start) costs and takes off the benchmark rung's path.

Needs a CUDA GPU. Each scenario runs in a fresh process and prints the wall time of
`krung.worker.timing.measure` on a small kernel (the benchmark rung's first measurement):
- cold: the profiler's first session is that measurement's;
- warm: `krung.worker.timing.start_profiler()` first (its own time is `warm_call_s`), then the
  measurement;
- and, for reference, a second measurement in the cold process.

    python benchmarks/profiler_start.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def scenario(warm: bool) -> dict[str, float]:
    import torch

    from krung.worker.timing import TimingPlan, measure, start_profiler

    a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    found: dict[str, float] = {}
    if warm:
        start = time.perf_counter()
        start_profiler()
        found["warm_call_s"] = time.perf_counter() - start
    plan = TimingPlan()
    for name in ("first_s", "second_s"):
        start = time.perf_counter()
        samples = measure(lambda i: a + b, 1, "cuda", plan)
        found[name] = time.perf_counter() - start
        found[name.replace("_s", "_mode")] = samples.mode
        found[name.replace("_s", "_median_us")] = sorted(samples.device_us)[
            len(samples.device_us) // 2]
    return found


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(scenario(sys.argv[1] == "warm")))
        return
    for name in ("cold", "warm", "cold", "warm"):
        out = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
        figures = json.loads(out)
        print(f"{name:5s} " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
