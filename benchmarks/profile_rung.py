"""The profile rung on a GPU: where its seconds go, fast sections against full, and what
ncu's kernel filters select.

1. Evaluates the version with `+profile` (the default ladder and the profile), `--turns`
   times with KRUNG_PROFILE_SET=fast and as many with full, and prints per turn the profile
   rung's seconds, its steps (`steps_s`: ncu starting the worker, the load, the inputs, the
   profiled call, ncu writing its report, reading it), the case profiled and why.
2. Runs a small torch program under ncu, two warm-up calls outside the NVTX range and one
   inside, and prints how many launches `--launch-count 2` and `--kernel-id :::1` each
   profile: whether ncu counts the warm-up's invocations in the kernel id (then `:::1`
   profiles nothing inside the range, which is why the rung counts launches instead).

    python benchmarks/profile_rung.py [--problem softmax] [--solution PATH] [--turns 3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import krung
from krung.judge.rungs.profile.ncu import NVTX_RANGE, find_ncu

REPO = Path(__file__).resolve().parent.parent

PROGRAM = f'''
import torch

x = torch.randn(1 << 20, device="cuda")
for _ in range(2):  # warm-up: a multiply and a sum kernel each time, outside the range
    (x * 2).sum()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("{NVTX_RANGE}")
(x * 2).sum()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
'''


def one_turn(problem: str, solution: Path, store: Path, profile_set: str) -> None:
    settings = krung.Settings.from_env().replace(profile_set=profile_set)
    start = time.perf_counter()
    run = krung.evaluate(problem, solution, device="cuda", store=store, settings=settings,
                         rungs="+profile")
    total = time.perf_counter() - start
    rung = run.rung("profile")
    figures = rung.figures
    steps = "  ".join(f"{k}={v:.1f}" for k, v in (figures.get("steps_s") or {}).items())
    print(f"{profile_set:4}  total {total:5.1f} s  profile {rung.duration_s:5.1f} s "
          f"({rung.status.value}{' ' + (rung.error_type or '') if not rung.ok else ''})  "
          f"{steps}")
    print(f"      case {figures.get('case')}: {figures.get('case_chosen_by')}; "
          f"{figures.get('kernels')} kernel(s) from {figures.get('launches_profiled')} "
          "launch(es)", flush=True)


def profiled(ncu: str, script: Path, *filters: str) -> int:
    done = subprocess.run([ncu, "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", *filters,
                           "--metrics", "gpu__time_duration.sum", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=300)
    return len(re.findall(r'==PROF== Profiling "', done.stdout + done.stderr))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--solution", type=Path,
                        default=REPO / "problems/softmax/solutions/triton_rowwise.py")
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    ncu = find_ncu()
    if ncu is None:
        raise SystemExit("ncu (Nsight Compute) is not installed or not on PATH")
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["TRITON_CACHE_DIR"] = str(Path(scratch) / "triton-cache")
        store = Path(scratch) / "krung.db"
        krung.calibrate(store=store)  # the profile ranks the cases with kept ceilings
        for profile_set in ("fast", "full"):
            for _ in range(args.turns):
                one_turn(args.problem, args.solution, store, profile_set)
        script = Path(scratch) / "warm_then_range.py"
        script.write_text(PROGRAM)
        counted = profiled(ncu, script, "--launch-count", "2")
        first = profiled(ncu, script, "--kernel-id", ":::1")
    print(f"inside the range (2 kernels): --launch-count 2 profiled {counted}, "
          f"--kernel-id :::1 profiled {first}"
          + (" (ncu counts the warm-up's invocations)" if first == 0 and counted == 2 else ""))


if __name__ == "__main__":
    main()
