"""How long a passing cold turn takes on a CPU, whatever seed is drawn (issue 30's figure).

For each problem, `krung run PROBLEM VERSION --rungs static,compile,run,correctness --seed S`
with KRUNG_SERVICE=off (a fresh judge and worker, as an agent's first turn gets) for seeds
1..N, each timed from its start to its exit. Every turn must pass. Prints, per problem, the
median and the slowest turn, its seed, and the correctness rung's part of it; `import torch`
is timed at the start and the end, to show how loaded the machine was.

    python benchmarks/cpu_turns.py [--seeds 20] [--problem scale_shift:triton_blocked ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KRUNG = Path(sys.executable).with_name("krung")
RUNGS = "static,compile,run,correctness"
DEFAULT = ["scale_shift:triton_blocked", "row_logsumexp:triton_two_paths",
           "mish:triton_libdevice", "softmax:triton_rowwise"]


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def import_torch_s() -> float:
    return timed([sys.executable, "-c", "import torch"], REPO, dict(os.environ))[0]


def turns(problem: str, version: str, seeds: int, work: Path) -> list[tuple[int, float, float]]:
    env = {**os.environ, "KRUNG_SERVICE": "off"}
    path = REPO / "problems" / problem
    out = []
    for seed in range(1, seeds + 1):
        seconds, stdout = timed([str(KRUNG), "run", str(path),
                                 str(path / "solutions" / f"{version}.py"), "--rungs", RUNGS,
                                 "--seed", str(seed), "--json"], work, env)
        run = json.loads(stdout)
        if not run["ok"]:
            failed = next(r for r in run["rungs"] if r["status"] != "ok")
            raise SystemExit(f"{problem}/{version} seed {seed} failed at {failed['name']}: "
                             f"{failed['error']}")
        correctness = next(r for r in run["rungs"] if r["name"] == "correctness")
        out.append((seed, seconds, correctness["duration_s"]))
        print(f"  {problem} seed {seed:2d}: {seconds:5.1f} s (correctness "
              f"{correctness['duration_s']:.1f} s)", file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--problem", action="append", help="NAME:VERSION (repeatable)")
    args = parser.parse_args()
    before = import_torch_s()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for item in args.problem or DEFAULT:
            problem, version = item.split(":")
            turns(problem, version, 1, Path(work))  # untimed: Triton's cache in place
            rows.append((item, turns(problem, version, args.seeds, Path(work))))
    after = import_torch_s()
    print(f"import torch: {before:.2f} s before, {after:.2f} s after")
    print(f"{'problem:version':34} {'median s':>9} {'slowest s':>10} {'seed':>5} "
          f"{'its correctness s':>18}")
    for item, runs in rows:
        seed, slowest, correctness = max(runs, key=lambda r: r[1])
        median = statistics.median(r[1] for r in runs)
        print(f"{item:34} {median:9.2f} {slowest:10.2f} {seed:5d} {correctness:18.2f}")


if __name__ == "__main__":
    main()
