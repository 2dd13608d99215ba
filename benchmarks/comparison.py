"""How long the judge takes to compare one output with the reference's (krung.judge.metrics
`compare`): the correctness rung does it for every case and seed, so on a CPU it is most of
the rung's time for elementwise problems with large outputs.

Random float32 outputs within the tolerance, all finite (the fast path: no masks) and with a
NaN in matched places of each piece (the path with masks); best of `--repeat`, with the
given torch threads. `--metrics FILE` times another copy of metrics.py (an older one, from
`git show REV:src/krung/judge/metrics.py > old.py`) beside the installed one.

    python benchmarks/comparison.py [--elements 10745280] [--threads 1] [--metrics old.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from types import ModuleType

import torch

from krung.judge import metrics
from krung.judge.tolerance import default_for


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("other_metrics", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def best_of(module: ModuleType, out: torch.Tensor, ref: torch.Tensor, repeat: int) -> float:
    tol = default_for("float32")
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = module.compare(out, ref, tol)
        best = min(best, time.perf_counter() - start)
    assert result.passed, result.reason
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=6552 * 1640)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--metrics", default=None, help="another metrics.py to time beside")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    ref = torch.randn(args.elements, generator=generator) * 0.01
    out = ref + 1e-7 * torch.randn(args.elements, generator=generator)
    with_nan_ref, with_nan_out = ref.clone(), out.clone()
    with_nan_ref[::100_003] = float("nan")  # a few in every piece, where the output has them too
    with_nan_out[::100_003] = float("nan")
    modules = [("installed", metrics)] + ([("other", load(args.metrics))] if args.metrics else [])
    print(f"{args.elements} float32 elements, {args.threads} torch thread(s), "
          f"best of {args.repeat}")
    print("| metrics | all finite s | ns/element | with NaN s | ns/element |")
    print("|---|---:|---:|---:|---:|")
    for name, module in modules:
        finite = best_of(module, out, ref, args.repeat)
        nan = best_of(module, with_nan_out, with_nan_ref, args.repeat)
        print(f"| {name} | {finite:.3f} | {finite / args.elements * 1e9:.1f} | {nan:.3f} | "
              f"{nan / args.elements * 1e9:.1f} |")


if __name__ == "__main__":
    main()
