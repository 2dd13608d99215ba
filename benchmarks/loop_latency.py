"""How long one turn of the loop takes: `krung run` cold, and through a warm service, beside
`python -c "import torch"`, measured turn by turn in one go on the same machine.

A turn runs three commands as subprocesses, each timed from its start to its exit: import
torch; `krung run` with KRUNG_SERVICE=off (a cold judge and worker); `krung run` through the
store's service (krung.host.service), whose judge for it is warm: between turns the benchmark
waits until the service has a judge ready, as an agent's thinking time between two versions
would let it. One untimed turn of each kind comes first, so Triton's cache (and, on a GPU, the
roofline's calibration) is in place: the version was "compiled once before". Prints the
median of each over the turns, its ratio to import torch, and the rungs' split of the median
turn.

    python benchmarks/loop_latency.py [--problem softmax] [--solution PATH] [--device auto]
        [--rungs static,compile,run,correctness] [--turns 5] [--changed]

Issue 18's targets: on a CPU, static..correctness <= 1.5x import torch; on the H200, warm
static..roofline without the profile <= 5 s and cold <= 15 s:

    python benchmarks/loop_latency.py --device cuda \\
        --rungs static,compile,run,correctness,determinism,benchmark,artifacts,roofline
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

from krung.host import service

REPO = Path(__file__).resolve().parent.parent
CPU_RUNGS = "static,compile,run,correctness"


def timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited with {done.returncode}:\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def wait_ready(store: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = service.status(store)
        if found is None:
            raise SystemExit("the service is gone; its log: "
                             f"{service.paths(store)[2] / 'service.log'}")
        if found["pools"] and all(p["ready"] for p in found["pools"]):
            return
        time.sleep(0.1)
    raise SystemExit("no judge got ready in time")


def rung_split(stdout: str) -> dict[str, float]:
    run = json.loads(stdout)
    split = {r["name"]: r["duration_s"] for r in run["rungs"]}
    split["(judge)"] = run["env"].get("judge")  # type: ignore[assignment]
    return split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--solution", type=Path,
                        default=REPO / "problems/softmax/solutions/triton_rowwise.py")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rungs", default=CPU_RUNGS)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--changed", action="store_true",
                        help="a changed version every turn (a comment added: a new sha256, "
                             "new compile caches), as an agent's next version would be")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "store" / "krung.db"
        store.parent.mkdir()
        env = dict(os.environ, KRUNG_STORE=str(store),
                   TRITON_CACHE_DIR=str(Path(scratch) / "triton-cache"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"),
                                                          env.get("PYTHONPATH")]))
        torch_cmd = [sys.executable, "-c", "import torch"]
        solution = args.solution
        if args.changed:  # beside the original, so its imports and neighbours still resolve
            solution = args.solution.with_name(f"loop_latency_{os.getpid()}_{solution.name}")
        original = args.solution.read_text()
        run_cmd = [sys.executable, "-m", "krung", "run", args.problem, str(solution),
                   "--rungs", args.rungs, "--device", args.device, "--json"]
        turns = iter(range(1 << 30))

        def change() -> None:
            if args.changed:
                solution.write_text(f"{original}\n# turn {next(turns)}\n")
        cold_env = dict(env, KRUNG_SERVICE="off")
        warm_env = dict(env, KRUNG_SERVICE="auto")
        service.start(store, idle_s=3600)
        try:
            print("untimed first turns (compile, calibrate)", file=sys.stderr, flush=True)
            change()
            timed(run_cmd, cold_env)
            timed(run_cmd, warm_env)
            figures: dict[str, list[float]] = {"import torch": [], "cold": [], "warm": []}
            splits: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
            for turn in range(args.turns):
                # the service replaces the judge the last warm turn used: not beside a timing
                wait_ready(store)
                figures["import torch"].append(timed(torch_cmd, env)[0])
                change()
                seconds, out = timed(run_cmd, cold_env)
                figures["cold"].append(seconds)
                splits["cold"].append(rung_split(out))
                wait_ready(store)
                change()
                seconds, out = timed(run_cmd, warm_env)
                figures["warm"].append(seconds)
                splits["warm"].append(rung_split(out))
                print(f"  turn {turn + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s"
                                                         for k, v in figures.items()),
                      file=sys.stderr, flush=True)
        finally:
            service.stop(store)
            if args.changed:
                solution.unlink(missing_ok=True)

    torch_s = statistics.median(figures["import torch"])
    print(f"loop latency: {args.problem} / {args.solution.name}"
          f"{' (changed every turn)' if args.changed else ''}, rungs {args.rungs}, device "
          f"{args.device}, {os.cpu_count()} CPU cores; median of {args.turns} turns")
    print(f"{'':<14} {'median s':>9} {'x import torch':>15} {'min s':>7} {'max s':>7}")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"{name:<14} {median:>9.2f} {median / torch_s:>15.2f} {min(values):>7.2f} "
              f"{max(values):>7.2f}")
    print()
    for kind in ("cold", "warm"):
        middle = sorted(range(len(figures[kind])), key=figures[kind].__getitem__)[
            len(figures[kind]) // 2]
        split = splits[kind][middle]
        judge = split.pop("(judge)")
        rungs = sum(v for v in split.values())
        print(f"{kind} median turn (judge: {judge}): "
              + ", ".join(f"{k} {v:.2f}" for k, v in split.items())
              + f"; outside the rungs {figures[kind][middle] - rungs:.2f} s")


if __name__ == "__main__":
    main()
