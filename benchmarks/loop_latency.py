"""How long one turn of the loop takes: one evaluation, cold and with warm caches.

Prints the wall time of `krung.evaluate` on a built-in problem, split by rung, plus the
overhead outside the rungs (starting the judge and the worker, loading the problem, tearing
down). "Cold" uses a fresh, empty Triton cache; "warm" runs reuse it.

    python benchmarks/loop_latency.py [--problem softmax] [--solution PATH] [--device auto]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import krung

REPO = Path(__file__).resolve().parent.parent


def one_turn(problem: str, solution: Path, device: str, store: Path) -> dict[str, float]:
    start = time.perf_counter()
    run = krung.evaluate(problem, solution, device=device, store=store)
    total = time.perf_counter() - start
    if not run.ok:
        raise SystemExit("the evaluation failed:\n" + "\n".join(r.line() for r in run.rungs))
    row = {"total": total}
    row.update({r.name: r.duration_s for r in run.rungs})
    row["outside rungs"] = total - sum(r.duration_s for r in run.rungs)
    compile_figures = run.rung("compile").figures
    row["(worker start)"] = compile_figures.get("worker_start_s") or 0.0
    row["(first call)"] = compile_figures.get("first_call_s") or 0.0
    row["_device"] = run.device  # type: ignore[assignment]
    print(f"  one turn: {total:.1f} s", file=sys.stderr, flush=True)  # progress: turns are long
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--solution", type=Path,
                        default=REPO / "problems/softmax/solutions/triton_rowwise.py")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--warm", type=int, default=3, help="warm runs after the cold one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        os.environ["TRITON_CACHE_DIR"] = str(Path(scratch) / "triton-cache")
        store = Path(scratch) / "krung.db"
        cold = one_turn(args.problem, args.solution, args.device, store)
        warm = [one_turn(args.problem, args.solution, args.device, store)
                for _ in range(args.warm)]

    device = cold.pop("_device")
    for row in warm:
        row.pop("_device")
    print(f"loop latency: {args.problem} / {args.solution.name} on {device}")
    print(f"{'phase':<16} {'cold s':>8} {'warm s (median of ' + str(len(warm)) + ')':>22}")
    for key in cold:
        warm_value = statistics.median(r[key] for r in warm) if warm else float("nan")
        print(f"{key:<16} {cold[key]:>8.2f} {warm_value:>22.2f}")


if __name__ == "__main__":
    main()
