"""What krung's @triton.autotune hook (krung.worker.launches) adds to each call.

An autotuned kernel is tuned once for its key (for real, under Triton's interpreter: no GPU
needed), then called as the benchmark rung's timed calls call it, first without the hook,
then with it. So that the figure is the hook's and not the launch's noise, the tuned
kernel's launch is swapped for a no-op after tuning: what is timed is `Autotuner.run` (key,
cache lookup, config) plus krung's hook; the minimum over batches takes out the noise.

    TRITON_INTERPRET=1 python benchmarks/autotune_hook.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

KERNEL = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})],
                 key=["n"])
@triton.jit
def add_kernel(a_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(a_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)
'''


def per_call_us(call, batches: int = 50, calls: int = 2000) -> float:
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1 (the kernel runs under Triton's interpreter)")
    import torch

    from krung.worker import launches
    from krung.worker.interpreter import fix_autotune

    fix_autotune()
    folder = Path(tempfile.mkdtemp())
    (folder / "tuned_add.py").write_text(KERNEL)
    sys.path.insert(0, str(folder))
    from tuned_add import add_kernel

    a, out = torch.randn(16), torch.empty(16)
    add_kernel[(1,)](a, out, 16)  # tuned once, for real, outside the measurement

    class NoLaunch:  # the launch, out of the figure
        def run(self, *args, **kwargs):
            return None

    add_kernel.fn = NoLaunch()

    def call() -> None:
        add_kernel.run(a, out, 16, grid=(1,), warmup=False)

    plain = per_call_us(call)
    log = launches.LaunchLog()
    launches._wrap_autotuner(log)  # the autotune hook alone, as install() adds it
    call()  # the first call after it notes the choice
    hooked = per_call_us(call)
    print(f"per call: {plain:.1f} us without the hook, {hooked:.1f} us with it: "
          f"+{hooked - plain:.1f} us; records kept outside tuning: {len(log.recent)}")


if __name__ == "__main__":
    main()
