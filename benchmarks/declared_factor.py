"""How many bytes of the GPU krung's judge and worker hold per byte a KernelBench problem
declares: the evidence for krung.host.scale.gpu_memory.DECLARED_FACTOR, from the problem
sets' rows (benchmarks/problem_sets.py, run on a GPU at declared sizes).

    python benchmarks/declared_factor.py SETS_JSON SETS_DIR

SETS_JSON: the rows a run wrote (--out); SETS_DIR: the unpacked sets (its KernelBench/
KernelBench/levelN folders). Each passing baseline's judge and worker device peaks, summed,
over its declared bytes (inputs, weights and outputs, told on torch's meta device).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from krung.judge.problem.footprint import declared_bytes

GIB = 2**30


def ratios(rows: list[dict], sets: Path) -> list[tuple[str, float, float]]:
    """(problem, declared MiB, device MiB held) for each passing KernelBench baseline."""
    found = []
    for row in rows:
        if (row["family"], row["version"], row["ok"]) != ("kernelbench", "baseline", True):
            continue
        held = (row["judge_gpu_mib"] or 0) + (row["worker_gpu_mib"] or 0)
        level, name = row["problem"].split("/")
        told = declared_bytes(sets / "KernelBench" / "KernelBench" / level / f"{name}.py")
        if held and told:
            found.append((row["problem"], told / 2**20, held))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path)
    parser.add_argument("sets", type=Path)
    args = parser.parse_args()
    found = ratios(json.loads(args.rows.read_text()), args.sets)
    for label, least in (("all", 0), ("declaring 1 GiB or more", GIB)):
        factors = sorted(held / told for _, told, held in found if told * 2**20 >= least)
        if factors:
            print(f"{label}: {len(factors)} problems, device bytes per declared byte: median "
                  f"{statistics.median(factors):.1f}, 90th percentile "
                  f"{factors[int(0.9 * (len(factors) - 1))]:.1f}, most {factors[-1]:.1f}")


if __name__ == "__main__":
    main()
