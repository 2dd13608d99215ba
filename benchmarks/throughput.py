"""Versions evaluated per minute for a batch, with 1, 2, ... evaluations at once.

A batch of N copies of a small torch version of a small problem, correctness rungs only (the
correctness-heavy case the scaling goal is about), through the local executor: with
`--device cpu`, N workers; with `--gpus all` (or 0,1,...), one slot per GPU, counting 1, 2, ...
GPUs. Prints versions/minute and the efficiency against linear scaling from one slot.

    python benchmarks/throughput.py [--versions 8] [--slots 1,2] [--gpus all] [--device cpu]
"""

from __future__ import annotations

import argparse
import tempfile
import textwrap
import time
from pathlib import Path

import krung

PROBLEM = '''
import torch
description = "y = 2x + 1, small"
def reference(x):
    return x * 2 + 1
def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], generator=g, device=device),)
test_cases = [{"n": 1, "dtype": "float32"}, {"n": 1000, "dtype": "float32"},
              {"n": 65537, "dtype": "float32"}]
bench_cases = [{"n": 1 << 20, "dtype": "float32"}]
def flops(case):
    return 2 * case["n"]
def bytes_moved(case):
    return 8 * case["n"]
'''
VERSION = "def kernel(x):\n    return x * 2 + 1\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", type=int, default=8)
    parser.add_argument("--slots", default="1,2", help="slot counts to try")
    parser.add_argument("--gpus", default=None, help="all, or 0,1,...: slots are GPUs")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    counts = [int(s) for s in args.slots.split(",")]
    gpus = None
    if args.gpus:
        from krung.host.scale.local import visible_gpus

        gpus = visible_gpus() if args.gpus == "all" else args.gpus.split(",")
        counts = [c for c in counts if c <= len(gpus)]

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "small").mkdir()
        (root / "small" / "problem.py").write_text(textwrap.dedent(PROBLEM))
        versions = []
        for i in range(args.versions):
            path = root / "versions" / f"v{i}.py"
            path.parent.mkdir(exist_ok=True)
            path.write_text(VERSION)
            versions.append(path)
        settings = krung.Settings(store=root / "krung.db", device=args.device)
        rates = {}
        for count in counts:
            options = {"gpus": gpus[:count]} if gpus else {"workers": count}
            executor = krung.make_executor("local", **options)
            start = time.perf_counter()
            outcomes = krung.run_batch(str(root / "small"), versions, executor, settings,
                                       rungs="static,compile,run,correctness")
            elapsed = time.perf_counter() - start
            assert all(o.run is not None and o.run.ok for o in outcomes)
            rates[count] = 60 * len(versions) / elapsed
    unit = "GPUs" if gpus else "workers"
    print(f"throughput: {args.versions} versions, correctness rungs, device {args.device}")
    print(f"{unit:>8} {'versions/min':>13} {'efficiency':>11}")
    for count, rate in rates.items():
        efficiency = rate / (rates[counts[0]] * count / counts[0])
        print(f"{count:>8} {rate:>13.1f} {100 * efficiency:>10.0f}%")


if __name__ == "__main__":
    main()
