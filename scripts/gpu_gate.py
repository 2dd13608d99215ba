"""The GPU gate: every path only a GPU runs, in one device call (scripts/gpu_check.sh gate).

Three parts at once, on one GPU:
- the `gpu` tests, in groups of test files, each a pytest of its own;
- the corpus: the built-in problems' versions, the KernelBench- and GPU MODE-format test
  problems' solutions and wrong versions (Triton, CUDA C++, CuPy, numba, torch), each
  through the default ladder twice, by a cold `krung run` and through the warm service;
  an honest version must pass, a wrong one fail, and krung must not crash: exit 3,
  `outcome: error`, a second try (`env.first_try`) or a crash's mark in a judge's or
  worker's log all count as a krung crash;
- `krung suite` over the first KernelBench level-1 problems at their declared sizes, with
  their honest baselines (rungs static..benchmark): its problems per minute.

Prints the details, then one last line, `gpu gate: N passed, M failed, C krung crashes,
suite P problems/min`, and appends that line, the commit and the device to
benchmarks/GPU_GATE.md (and to $OUT/GPU_GATE.line, since a device call's copy of the
repository does not come back).

The whole gate does not fit one 10-minute device call: on an H100 the tests alone outlast
it beside the corpus. `--parts` runs some of them (`tests` in one call, `corpus,suite` in
the next); the line then names the parts it covers, and a gate is passed when every part
has passed at one commit.

    python3 scripts/gpu_gate.py --sets .gpu/problem_sets.tar.gz --out /tmp/krung-gate
    python3 scripts/gpu_gate.py --parts tests --limit 560
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import itertools
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# krung from this checkout, in every process the gate starts (as scripts/gpu_check.sh sets it)
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("PYTHONUNBUFFERED", "1")
# The groups of `gpu` test files, each one pytest process; what GPU paths changed last first.
TEST_GROUPS = [
    ["tests/test_timing.py", "tests/test_delegation.py", "tests/test_gpu.py",
     "tests/test_spec.py", "tests/test_service.py"],
    ["tests/test_red_team.py", "tests/test_gpu_red_team.py", "tests/test_gpu_persisting_l2.py",
     "tests/test_sandbox.py"],
    ["tests/test_kernelbench.py", "tests/test_gpumode.py", "tests/test_builtin_problems.py",
     "tests/test_scale.py", "tests/test_gpu_profile_trace.py", "tests/test_gpu_roofline.py",
     "tests/test_gpu_dsls.py"],
]
# What a judge's or worker's log holds only when CUPTI, kineto or the process broke.
CRASH_MARKS = re.compile(r"Segmentation fault|Fatal Python error|MULTIPLE_SUBSCRIBERS|"
                         r"External init callback must run in same thread")
MISSING = ("cutedsl", "tilelang")  # DSLs whose wheels a plain device call does not carry
PARTS = ("tests", "corpus", "suite")


def corpus(count: int) -> list[tuple[str, str, bool]]:
    """(problem, version, should pass) for `count` of the versions krung ships or tests with,
    taken in turn from the native, KernelBench and GPU MODE ones (every DSL and format)."""
    native, kernelbench, gpumode = [], [], []
    # vector_add first: its versions are the DSLs (CUDA C++, CuPy, numba, Triton)
    for folder in sorted((REPO / "problems").iterdir(), key=lambda p: (p.name != "vector_add",
                                                                         p.name)):
        for version in sorted((folder / "solutions").glob("*.py")):
            if not any(name in version.stem for name in MISSING):
                native.append((str(folder), str(version), not version.stem.startswith("wrong")))
    data = REPO / "tests" / "data"
    for kind, passes in (("solutions", True), ("wrong", False)):
        for version in sorted((data / "kernelbench" / kind).glob("*.py")):
            kernelbench.append((str(data / "kernelbench" / version.name), str(version), passes))
    for folder in sorted(p for p in (data / "gpumode").iterdir() if p.is_dir()):
        gpumode.append((str(folder), str(folder / "submission.py"), True))
        gpumode += [(str(folder), str(v), False) for v in sorted((folder / "solutions").glob("*.py"))]
    turns = [job for group in itertools.zip_longest(native, kernelbench, gpumode)
             for job in group if job is not None]
    return turns[:count]


def crash_marks(run_dir: Path) -> list[str]:
    found = []
    for log in sorted(run_dir.glob("*.log")):
        text = log.read_text(errors="replace")
        found += [f"{log.name}: {m}" for m in sorted(set(CRASH_MARKS.findall(text)))]
    return found


def ladder_run(problem: str, version: str, passes: bool, mode: str, scratch: Path,
               device: str = "cuda", limit_s: float = 300) -> dict:
    """One default-ladder run, and what became of it."""
    store = scratch / mode / "krung.db"
    env = {**os.environ, "KRUNG_STORE": str(store), "KRUNG_DEVICE": device,
           "KRUNG_SERVICE": "off" if mode == "cold" else "on"}
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "krung", "run", problem, version, "--json"],
                              capture_output=True, text=True, timeout=limit_s, env=env,
                              cwd=scratch)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        code, out, err = -1, "", f"hung: no verdict in {limit_s:.0f} s"
    row = {"problem": Path(problem).name, "version": Path(version).name, "mode": mode,
           "should_pass": passes, "exit": code, "wall_s": round(time.monotonic() - start, 1)}
    try:
        run = json.loads(out)
    except json.JSONDecodeError:
        run = {}
    row["outcome"] = run.get("outcome")
    failed = next((r for r in run.get("rungs", []) if r["status"] == "failed"), None)
    row["failed"] = (f"{failed['name']}: {(failed['error'] or '').splitlines()[0][:240]}"
                     if failed else None)
    row["error"] = (run.get("error") or "").splitlines()[0][:200] if run.get("error") else None
    marks = crash_marks(store.parent / "runs" / run["run_id"]) if run.get("run_id") else []
    first = run.get("env", {}).get("first_try")
    row["crash"] = (code == 3 or run.get("outcome") == "error" or bool(first) or bool(marks))
    row["crash_why"] = "; ".join(filter(None, [row["error"], first and first["error"], *marks]))
    row["as_expected"] = (not row["crash"] and code == (0 if passes else 1)
                          and row["outcome"] == ("passed" if passes else "failed"))
    if not row["as_expected"] and not out:
        row["stderr"] = err[-600:]
    return row


def run_tests(group: list[str], index: int, out: Path, limit_s: float) -> dict:
    log = out / f"tests{index}.log"
    with log.open("w") as sink:
        try:
            subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider",
                            "-v", "-rfEs", "--tb=short", "--durations=10", *group],
                           stdout=sink, stderr=subprocess.STDOUT, cwd=REPO,
                           timeout=limit_s)
        except subprocess.TimeoutExpired:
            sink.write(f"\n(tests group {index} killed at its {limit_s:.0f} s limit)\n")
    text = log.read_text(errors="replace")
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors)", text)}
    failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)
                        + re.findall(r"^(\S+::\S+) (?:FAILED|ERROR)", text, re.M)))
    if "limit)" in text[-200:]:  # killed: what finished is all that counts
        counts = {"passed": len(re.findall(r" PASSED", text))}
    return {"passed": counts.get("passed", 0),
            "failed": counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0),
            "failures": failed, "killed": "limit)" in text[-200:]}


def run_suite(sets: Path, count: int, out: Path, scratch: Path, limit_s: float) -> dict:
    """`krung suite` over the first `count` level-1 problems, honest baselines."""
    folder = scratch / "suite"
    with tarfile.open(sets) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith("KernelBench/KernelBench/level1/") and m.isfile()]
        tar.extractall(folder, members=members, filter="data")
    chosen = sorted((folder / "KernelBench/KernelBench/level1").glob("*.py"),
                    key=lambda p: int(p.name.split("_")[0]))[:count]
    (folder / "problems").mkdir()
    (folder / "baselines").mkdir()
    for path in chosen:
        (folder / "problems" / path.name).write_text(path.read_text())
        (folder / "baselines" / path.name).write_text(path.read_text() + "\nModelNew = Model\n")
    # The inputs drawn on the GPU: the candidate default at declared sizes (issue 28).
    env = {**os.environ, "KRUNG_STORE": str(folder / "krung.db"), "KRUNG_RUN_TIMEOUT": "150",
           "KRUNG_INPUTS_ON_DEVICE": os.environ.get("KRUNG_INPUTS_ON_DEVICE", "1")}
    start = time.monotonic()
    with (out / "suite.log").open("w") as err:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "krung", "suite", str(folder / "problems"), "--solutions",
                 str(folder / "baselines"), "--gpus", "all", "--per-gpu", "2", "--rungs",
                 "static,compile,run,correctness,benchmark", "--json"],
                stdout=subprocess.PIPE, stderr=err, text=True, timeout=limit_s, env=env)
            suite = json.loads(done.stdout)
        except (subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
            return {"problems": 0, "per_min": 0.0, "crashes": 0, "killed": True,
                    "why": type(exc).__name__}
    minutes = (time.monotonic() - start) / 60
    problems = suite["problems"]
    marks = [m for p in problems if p["run_id"]
             for m in crash_marks(folder / "runs" / p["run_id"])]
    return {"problems": len(problems), "minutes": round(minutes, 2),
            "per_min": round(len(problems) / minutes, 1), "scores": suite["scores"],
            "crashes": suite["scores"].get("krung_errors", 0) + len(marks), "marks": marks,
            "not_correct": [f"{p['problem']}: {p['verdict']} ({p['reason']})"
                            for p in problems if not p["correct"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=Path, default=REPO / ".gpu" / "problem_sets.tar.gz")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/krung-gate")))
    parser.add_argument("--suite", type=int, default=20, help="level-1 problems in the suite")
    parser.add_argument("--jobs", type=int, default=3, help="corpus runs at once, per mode")
    parser.add_argument("--limit", type=float, default=250,
                        help="seconds for the corpus and the tests, at once; the suite follows")
    parser.add_argument("--suite-limit", type=float, default=280, help="seconds for the suite")
    parser.add_argument("--runs", type=int, default=50, help="corpus runs, half cold, half warm")
    parser.add_argument("--device", default="cuda", help="cpu: try the corpus part here")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"which of {', '.join(PARTS)} to run (comma-separated)")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if not parts or set(parts) - set(PARTS):
        parser.error(f"--parts takes some of {', '.join(PARTS)}, comma-separated")
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="krung-gate-"))
    started = time.monotonic()
    versions = corpus(args.runs // 2) if "corpus" in parts else []
    jobs = [(p, v, ok, mode) for mode in ("cold", "warm") for p, v, ok in versions]
    rows: list[dict] = []
    lock = threading.Lock()

    def one(job: tuple[str, str, bool, str]) -> None:
        if time.monotonic() - started > args.limit:  # out of time: not run, said so
            row = {"problem": Path(job[0]).name, "version": Path(job[1]).name, "mode": job[3],
                   "as_expected": False, "crash": False, "skipped": "out of the gate's time"}
        else:
            row = ladder_run(*job, scratch, args.device, args.limit / 3)
        with lock, (args.out / "corpus.jsonl").open("a") as sink:
            rows.append(row)
            sink.write(json.dumps(row) + "\n")

    # The corpus and the tests at once (neither needs much GPU memory), then the suite
    # alone: at declared sizes its problems need the whole GPU.
    on_gpu = args.device == "cuda"
    with concurrent.futures.ThreadPoolExecutor(2 * args.jobs + len(TEST_GROUPS)) as pool:
        tests = [pool.submit(run_tests, g, i, args.out, args.limit)
                 for i, g in enumerate(TEST_GROUPS) if on_gpu and "tests" in parts]
        # Cold and warm runs interleaved, `jobs` of each at a time.
        list(pool.map(one, [j for pair in zip(jobs[:len(jobs) // 2], jobs[len(jobs) // 2:],
                                                 strict=True) for j in pair]))
        test_results = [t.result() for t in tests]
    suite_result = (run_suite(args.sets, args.suite, args.out, scratch, args.suite_limit)
                    if args.sets.exists() and on_gpu and "suite" in parts else
                    {"problems": 0, "per_min": 0.0, "crashes": 0,
                     "why": "not asked for" if "suite" not in parts else "no --sets or no GPU"})
    report(rows, test_results, suite_result, args.out, time.monotonic() - started, parts)


def report(rows: list[dict], tests: list[dict], suite: dict, out: Path, wall_s: float,
           parts: list[str]) -> None:
    lines = []
    for row in sorted(rows, key=lambda r: (r["as_expected"], r["problem"])):
        if not row["as_expected"]:
            lines.append(f"corpus NOT AS EXPECTED {row['mode']} {row['problem']} "
                         f"{row['version']}: exit {row.get('exit')} outcome {row.get('outcome')} "
                         f"{row.get('failed') or ''} {row.get('crash_why') or ''}"
                         f"{row.get('skipped') or ''} {row.get('stderr', '')[-300:]}")
    for index, group in enumerate(tests):
        lines += [f"tests{index} FAILED {name}" for name in group["failures"]]
        if group["killed"]:
            lines.append(f"tests{index} killed at the gate's limit")
    lines += [f"suite not correct: {line}" for line in suite.get("not_correct", [])]
    lines += [f"suite crash mark: {m}" for m in suite.get("marks", [])]
    by_mode = {m: [r for r in rows if r["mode"] == m] for m in ("cold", "warm")}
    for mode, found in by_mode.items():
        walls = sorted(r["wall_s"] for r in found if "wall_s" in r)
        if walls:
            lines.append(f"corpus {mode}: {len(found)} runs, median {walls[len(walls) // 2]} s, "
                         f"max {walls[-1]} s")
    lines.append(f"suite: {json.dumps({k: v for k, v in suite.items() if k != 'not_correct'})}")
    passed = sum(r["as_expected"] for r in rows) + sum(t["passed"] for t in tests)
    failed = sum(not r["as_expected"] for r in rows) + sum(t["failed"] for t in tests)
    crashes = sum(r["crash"] for r in rows) + suite["crashes"]
    which = "" if set(parts) == set(PARTS) else f" ({', '.join(parts)} only)"
    last = (f"gpu gate{which}: {passed} passed, {failed} failed, {crashes} krung crashes"
            + (f", suite {suite['per_min']} problems/min" if "suite" in parts else ""))
    lines += [f"gate wall time {wall_s:.0f} s", last]
    text = "\n".join(lines) + "\n"
    (out / "gate.txt").write_text(text)
    print(text, end="")
    entry = f"- {datetime.date.today()} {_commit()} {_device()}: {last}\n"
    (out / "GPU_GATE.line").write_text(entry)
    with (REPO / "benchmarks" / "GPU_GATE.md").open("a") as gate:
        gate.write(entry)


def _commit() -> str:
    """The commit under test: KRUNG_GATE_COMMIT where the caller knows it (a device call's
    copy of the working tree may carry another checkout's .git), else git's HEAD."""
    if os.environ.get("KRUNG_GATE_COMMIT"):
        return os.environ["KRUNG_GATE_COMMIT"]
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=REPO)
    return done.stdout.strip() or "unknown commit"


def _device() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True)
    except OSError:
        return "no GPU"
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "no GPU"


if __name__ == "__main__":
    main()
