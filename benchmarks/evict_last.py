"""Does an L2 eviction-priority hint carry a kernel's input past krung's flush? (issue 31 item 6)

Two Triton versions of y = 2x + 1, alike but for `eviction_policy="evict_last"` on the load,
timed by `krung run` (static..benchmark) at sizes whose input fits the L2 (where a kept line
would show) and at one that does not. If the flush removed what the hint keeps, their medians
agree; a hinted version much faster at the small sizes means the hint outlives the flush.

    python3 benchmarks/evict_last.py            # on a GPU; prints one line per size
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

PROBLEM = '''
import torch

description = "y = 2x + 1"


def reference(x):
    return x * 2 + 1


def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], generator=g, device=device),)


test_cases = [{"n": 1000, "dtype": "float32"}, {"n": 4099, "dtype": "float32"}]
bench_cases = [{"n": n, "dtype": "float32"} for n in (1 << 20, 1 << 22, 1 << 26)]


def flops(case):
    return 2 * case["n"]


def bytes_moved(case):
    return 8 * case["n"]
'''

VERSION = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _affine(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask{hint})
    tl.store(y_ptr + offsets, x * 2 + 1, mask=mask)


def kernel(x):
    y = torch.empty_like(x)
    _affine[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
'''


def medians(folder: Path, name: str, hint: str) -> dict[str, float]:
    version = folder / f"{name}.py"
    version.write_text(textwrap.dedent(VERSION.format(hint=hint)))
    # krung from this checkout, where it is not installed (the GPU image)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "KRUNG_STORE": str(folder / "krung.db"),
           "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "krung", "run", str(folder / "affine"),
                           str(version), "--device", "cuda", "--json", "--rungs",
                           "static,compile,run,correctness,benchmark"],
                          capture_output=True, text=True, env=env, timeout=240)
    if not done.stdout.strip():
        raise SystemExit(f"{name}: no verdict (exit {done.returncode}): {done.stderr[-1500:]}")
    run = json.loads(done.stdout)
    bench = next(r for r in run["rungs"] if r["name"] == "benchmark")
    if bench["status"] != "ok":
        raise SystemExit(f"{name}: benchmark {bench['status']}: {bench['error']}")
    return {row["case"]: row["median_us"] for row in bench["figures"]["per_case"]}


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="krung-evict-"))
    (folder / "affine").mkdir()
    (folder / "affine" / "problem.py").write_text(PROBLEM)
    plain = medians(folder, "plain", "")
    kept = medians(folder, "evict_last", ', eviction_policy="evict_last"')
    for case, us in plain.items():
        print(f"evict_last {case}: plain {us:.2f} us, evict_last {kept[case]:.2f} us, "
              f"plain/evict_last {us / kept[case]:.2f}")


if __name__ == "__main__":
    main()
