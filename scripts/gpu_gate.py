"""The GPU gate: every path only a GPU runs, in one device call (scripts/gpu_check.sh gate).

Three parts, on one GPU:
- the `gpu` tests, a few at a time in each of several pytest processes at once (`--test-workers`),
  the slowest first, so that their sum (half an hour in one process) fits the call;
- the corpus, beside them: the built-in problems' versions, the KernelBench- and GPU MODE-format
  test problems' solutions and wrong versions (Triton, CUDA C++, CuPy, numba, torch), each
  through the default ladder twice, by a cold `krung run` and through the warm service;
  an honest version must pass, a wrong one fail, and krung must not crash: exit 3,
  `outcome: error`, a second try (`env.first_try`) or a crash's mark in a judge's or
  worker's log all count as a krung crash;
- then, alone (at declared sizes its problems need the whole GPU), `krung suite` over the
  first KernelBench level-1 problems with their honest baselines (rungs static..benchmark):
  its problems per minute.

Prints the details, then one last line, `gpu gate: N passed, M failed, U not finished,
C krung crashes, suite P problems/min`, and appends that line, the commit and the device to
benchmarks/GPU_GATE.md (and to $OUT/GPU_GATE.line, since a device call's copy of the
repository does not come back). `--parts` runs some of the three; the line then names the
parts it covers.

A test killed at the gate's limit, or a test or corpus run never started for lack of time,
is not finished: not failed (on a slower machine the same ones pass later), not passed
either. The gate names them in $OUT/gate-rest.txt and does not pass; `--rest` runs just
those, with the whole limit, in the next device call on the same commit, and prints and
records its own line
(`gpu gate rest: N passed, M failed, U not finished`): only then has the gate passed.

    python3 scripts/gpu_gate.py --sets .gpu/problem_sets.tar.gz --out /tmp/krung-gate
    python3 scripts/gpu_gate.py --parts tests --limit 560
    python3 scripts/gpu_gate.py --rest .gpu/gate-rest.txt --limit 540
    python3 scripts/gpu_gate.py --learn-durations tests.log  # a gate's log: its tests' seconds
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import contextlib
import datetime
import itertools
import json
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# krung from this checkout, in every process the gate starts (as scripts/gpu_check.sh sets it)
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(REPO / "src"))  # and in this one (the suite's service log)
os.environ.setdefault("PYTHONUNBUFFERED", "1")
# The `gpu` test files, the longest first (Nsight Compute's replays, the roofline's
# calibration, builds, whole problem sets): at the end they were what the gate's time did not
# reach (41c0026; kernelbench, gpumode and scale at b4247b6: 195 s alone for their 10).
TEST_FILES = [
    "tests/test_gpu_roofline.py", "tests/test_gpu_profile_trace.py", "tests/test_gpu_dsls.py",
    "tests/test_spec.py", "tests/test_delegation.py", "tests/test_kernelbench.py",
    "tests/test_gpumode.py", "tests/test_scale.py", "tests/test_gpu.py",
    "tests/test_gpu_persisting_l2.py", "tests/test_red_team.py", "tests/test_timing.py",
    "tests/test_service.py", "tests/test_gpu_red_team.py", "tests/test_sandbox.py",
    "tests/test_builtin_problems.py",
]
# What the corpus runs already (every built-in, DSL and GPU MODE version through the default
# ladder) and what is off by default on a GPU (the sandbox): `gpu_check.sh ladder|formats|dsls`.
# The roofline's verdict for softmax and rmsnorm, and ncu's CSV against the profile's figures
# for softmax, take the paths vector_add's take (memory-bound, one kernel): `gpu_check.sh
# inspect` runs them, the gate vector_add's (and matmul's roofline).
NOT_IN_GATE = ("tests/test_builtin_problems.py::", "test_each_dsl_example_passes_the_whole_ladder",
               "test_gpu_gpumode_submissions_pass", "tests/test_sandbox.py::",
               "test_the_roofline_verdict_for_a_builtin_problem[softmax]",
               "test_the_roofline_verdict_for_a_builtin_problem[rmsnorm]",
               "test_profile_figures_match_ncus_own_csv[softmax]")
# Tests that took 45 s or more on an H100 beside the rest (a build, a timeout waited out, every
# rung): each starts first, alone in its pytest, so that none is left for the end.
SLOW_TESTS = ("test_the_cuda_ladder_runs_inside_the_walls", "never_ends_times_out",
              "cupti_tells_own_cuda_kernels")
CHUNK = 3  # tests per pytest process: its start (torch, conftest) paid once for a few
# Each gpu test's seconds in a gate's log (setup, call and teardown), to start the longest
# chunks first: chunks in the files' order left 120 s of red-team tests to the last minute,
# killed there on a slower H100. `--learn-durations LOG` refreshes it from a gate's tests.log.
DURATIONS = REPO / "scripts" / "gate_durations.json"
UNKNOWN_S = 30.0  # a test neither the table nor its file's other tests know: a typical one
# Files whose tests take a minute or more each beside the rest (nvcc): one test per pytest, so
# that they spread over the processes rather than queue in one. (The roofline's stay together:
# a pytest's tests share one calibration.)
ALONE = ("tests/test_gpu_dsls.py",)
# The tests marked `ncu` run Nsight Compute, which holds one lock per machine
# ($TMPDIR/nsight-compute-lock) while it profiles: spread over the processes (b4247b6) they
# waited on each other and held their processes idle. They run one after another in one
# pytest, started first.
NCU_MARK = "ncu"
RUN_LIMIT_S = 240  # a corpus run without a verdict by then is hung (a cold nvcc build beside
# the tests took 180 s at b4247b6)
# What a judge's or worker's log holds only when CUPTI, kineto or the process broke.
CRASH_MARKS = re.compile(r"Segmentation fault|Fatal Python error|MULTIPLE_SUBSCRIBERS|"
                         r"External init callback must run in same thread")
MISSING = ("cutedsl", "tilelang")  # DSLs whose wheels a plain device call does not carry
PARTS = ("tests", "corpus", "suite")
RECORD = REPO / "benchmarks" / "GPU_GATE.md"  # every gate's last line
REST = "gate-rest.txt"  # the tests and corpus runs a gate did not finish, for `--rest`


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


CORPUS = "corpus"  # a rest file's line for a corpus run: corpus MODE PASSES PROBLEM VERSION


def interleaved(jobs: list[tuple[str, str, bool, str]]) -> list[tuple[str, str, bool, str]]:
    """Cold and warm runs (the jobs' two halves) in turn, the warm ones half a turn later,
    so that one version's two runs (vector_add's 1 GiB tensors: 15 GiB a run) do not share
    the GPU at once."""
    cold, warm = jobs[:len(jobs) // 2], jobs[len(jobs) // 2:]
    warm = warm[len(warm) // 2 + 1:] + warm[:len(warm) // 2 + 1]
    return [j for pair in zip(cold, warm, strict=True) for j in pair]


def corpus_line(job: tuple[str, str, bool, str]) -> str:
    """A corpus run as a rest file's line (paths from the repository's root, which a device
    call's copy may have elsewhere)."""
    problem, version, passes, mode = job
    where = [str(Path(p).resolve().relative_to(REPO)) for p in (problem, version)]
    return " ".join([CORPUS, mode, "pass" if passes else "fail", *where])


def corpus_job(line: str) -> tuple[str, str, bool, str]:
    _, mode, passes, problem, version = line.split()
    return str(REPO / problem), str(REPO / version), passes == "pass", mode


def crash_marks(run_dir: Path) -> list[str]:
    found = []
    for log in sorted(run_dir.glob("*.log")):
        text = log.read_text(errors="replace")
        found += [f"{log.name}: {m}" for m in sorted(set(CRASH_MARKS.findall(text)))]
    return found


def ladder_run(problem: str, version: str, passes: bool, mode: str, scratch: Path,
               device: str = "cuda", limit_s: float = 300) -> dict:
    """One default-ladder run, and what became of it."""
    # both modes' stores in one folder: a CUDA C++ version built by its cold run is in the
    # build cache for its warm one (the build is not what the warm run is there to check)
    store = scratch / "corpus" / f"{mode}.db"
    env = {**os.environ, "KRUNG_STORE": str(store), "KRUNG_DEVICE": device,
           "KRUNG_SERVICE": "off" if mode == "cold" else "on"}
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "krung", "run", problem, version, "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, cwd=scratch, start_new_session=True)
    try:
        out, err = process.communicate(timeout=limit_s)
        code = process.returncode
    except subprocess.TimeoutExpired:  # its judge and worker too, not only the command
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        code, out, err = -1, "", f"hung: no verdict in {limit_s:.0f} s"
    row = {"problem": Path(problem).name, "version": Path(version).name, "mode": mode,
           "should_pass": passes, "exit": code, "wall_s": round(time.monotonic() - start, 1)}
    try:
        run = json.loads(out)
    except json.JSONDecodeError:
        run = {}
    row["outcome"] = run.get("outcome")
    failed = next((r for r in run.get("rungs", []) if r["status"] == "failed"), None)
    row["failed"] = (f"{failed['name']}: {((failed['error'] or '').splitlines() or [''])[0][:240]}"
                     if failed else None)
    row["error"] = (run.get("error") or "").splitlines()[0][:200] if run.get("error") else None
    # where a slow run's time went: its rungs, and the judge's steps before them
    if run.get("rungs"):  # a hung run's time is not outside its rungs: untold
        # to the millisecond, as the steps before them: a quick refusal's rungs take less
        # than 0.05 s, which a tenth rounded away
        row["in_rungs_s"] = round(sum(r.get("duration_s") or 0 for r in run["rungs"]), 3)
    row["before_rungs_s"] = (run.get("env") or {}).get("before_rungs_s")
    marks = crash_marks(store.parent / "runs" / run["run_id"]) if run.get("run_id") else []
    first = (run.get("env") or {}).get("first_try")
    row["crash"] = (code == 3 or run.get("outcome") == "error" or bool(first) or bool(marks))
    row["crash_why"] = "; ".join(filter(None, [row["error"], first and first["error"], *marks]))
    row["as_expected"] = (not row["crash"] and code == (0 if passes else 1)
                          and row["outcome"] == ("passed" if passes else "failed"))
    if not row["as_expected"] and not out:
        row["stderr"] = err[-600:]
    if not row["as_expected"] and run.get("run_id"):
        row["logs"] = run_logs(store.parent / "runs" / run["run_id"])
    return row


def collect(marks: str, paths: list[str] | None = None) -> list[str]:
    """The node ids of `paths` (the gate's test files) that `marks` selects. A test file that
    does not even collect stops the gate: it would drop out of it unseen. Given `paths`,
    none selected is an answer (exit 5), not an error."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marks,
                           "-p", "no:cacheprovider", *(paths or TEST_FILES)],
                          capture_output=True, text=True, cwd=REPO)
    nodes = [line for line in done.stdout.splitlines()
             if "::" in line and not any(skip in line for skip in NOT_IN_GATE)]
    if done.returncode not in (0, 5) or not (nodes or paths):
        raise SystemExit(f"the gpu tests do not collect (pytest exit {done.returncode}):\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return nodes


def gpu_tests(durations: dict[str, float]) -> list[list[str]]:
    """The `gpu` tests' node ids in chunks for one pytest each (`chunked`)."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        every, ncu = pool.map(collect, ["gpu", f"gpu and {NCU_MARK}"])
    return chunked(every, ncu, durations)


def rest_tests(nodes: list[str], durations: dict[str, float]) -> list[list[str]]:
    """The nodes a gate did not finish, in chunks as the gate makes them."""
    ncu = {_key(n) for n in collect(NCU_MARK, nodes)}
    return chunked(nodes, [n for n in nodes if _key(n) in ncu], durations)


def chunked(every: list[str], ncu: list[str], durations: dict[str, float]) -> list[list[str]]:
    """Chunks of `every` for one pytest each: Nsight Compute's (`ncu`) first, all in one;
    then the rest, the longest first by `durations`, each the slowest tests alone or a few
    of one file at a time. So that the thread pool's last chunks to start are short ones."""
    slow = [[n] for n in every if any(name in n for name in SLOW_TESTS) and n not in ncu]
    rest = [n for n in every if [n] not in slow and n not in ncu]
    chunks = []
    for node in rest:  # a few tests of one file together (its module fixtures built once)
        file = node.split("::")[0]
        if (chunks and len(chunks[-1]) < CHUNK and chunks[-1][0].split("::")[0] == file
                and file not in ALONE):
            chunks[-1].append(node)
        else:
            chunks.append([node])
    # sorted is stable: chunks of equal estimates keep the files' order
    longest = sorted([*slow, *chunks], key=lambda c: -sum(seconds(n, durations) for n in c))
    return [ncu, *longest] if ncu else longest


def seconds(node: str, durations: dict[str, float]) -> float:
    """A test's seconds as a gate measured them; a new one, its file's tests' mean."""
    if node in durations:
        return durations[node]
    file = node.split("::")[0] + "::"
    known = [s for n, s in durations.items() if n.startswith(file)]
    return sum(known) / len(known) if known else UNKNOWN_S


# A line of pytest's --durations: `90.68s call     tests/x.py::name`
DURATION = re.compile(r"^(\d+\.\d+)s (?:setup|call|teardown)\s+(\S.*?)\s*$", re.M)


def parse_durations(log: str) -> dict[str, float]:
    """Each test's seconds in a gate's tests.log (or one pytest's output): its setup, call
    and teardown together, as its chunk paid them."""
    found: dict[str, float] = {}
    for match in DURATION.finditer(log):
        found[match.group(2)] = found.get(match.group(2), 0.0) + float(match.group(1))
    return {node: round(s, 1) for node, s in found.items()}


def read_durations(table: Path) -> dict[str, float]:
    return json.loads(table.read_text()) if table.exists() else {}


def learn_durations(log: Path, table: Path) -> dict[str, float]:
    """The table with the seconds of `log`'s tests put in (a test the log does not time,
    killed or not run, keeps the seconds it had), written back."""
    learned = {**read_durations(table), **parse_durations(log.read_text(errors="replace"))}
    table.write_text(json.dumps(dict(sorted(learned.items())), indent=1) + "\n")
    return learned


# One test's line in pytest -v's output: `NODE PASSED [ 42%]`, `NODE XFAIL (reason) [ 42%]`
OUTCOME = re.compile(r" (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: \(.*\))?\s+\[\s*\d+%\]")


def _key(node: str) -> str:
    """A node id whatever folder its path is relative to: pytest -v writes it relative to
    where pytest runs (the repository), a caller may give it absolute."""
    path, sep, name = node.partition("::")
    return str((REPO / path).resolve()) + sep + name


def not_finished(nodes: list[str], log: str) -> list[str]:
    """The nodes of a chunk that its pytest's -v output gives no outcome for: once the chunk
    is killed, the one that was running and those after it."""
    reported = {_key(line[:m.start()].strip()) for line in log.splitlines()
                for m in [OUTCOME.search(line)] if m}
    return [n for n in nodes if _key(n) not in reported]


def run_tests(nodes: list[str], index: int, out: Path, limit_s: float) -> dict:
    """One pytest over a chunk of tests, counted test by test. A test the gate's limit cut
    short (the chunk killed, or never started) is not finished; one without a result because
    pytest itself died counts as failed."""
    log = out / f"tests{index:02d}.log"
    if limit_s <= 0:
        log.write_text("not run: out of the gate's time\n" + "\n".join(nodes) + "\n")
        return {"passed": 0, "failed": 0, "skipped": 0, "nodes": len(nodes), "failures": [],
                "not_finished": nodes, "why": "not started: out of the gate's time"}
    with log.open("w") as sink:
        # -rP: what a passed test printed (its figures) in the log's summary, where it does
        # not split -v's outcome lines
        code = run_killing_group([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
                                  "-rfEsP", "--tb=short", "--durations=0", *nodes],
                                 sink, limit_s)
        if code is None:
            sink.write(f"\n(tests chunk {index} killed at the gate's limit, {limit_s:.0f} s)\n")
    text = log.read_text(errors="replace")
    outcomes = [m.group(1) for m in OUTCOME.finditer(text)]
    passed = sum(o in ("PASSED", "XFAIL") for o in outcomes)
    skipped = outcomes.count("SKIPPED")
    failed = sum(o in ("FAILED", "ERROR", "XPASS") for o in outcomes)
    failures = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)))
    counted = {"passed": passed, "failed": failed, "skipped": skipped, "failures": failures,
               "nodes": len(nodes), "not_finished": [], "why": ""}
    if code is None:
        counted["not_finished"] = not_finished(nodes, text)
        counted["why"] = f"killed at the gate's limit, {limit_s:.0f} s"
    elif (missing := len(nodes) - passed - skipped - failed) > 0:
        failures.append(f"{missing} of {len(nodes)} tests from {nodes[0]}: "
                        f"no result (pytest exit {code})")
        counted["failed"] += missing
    return counted


def run_killing_group(command: list[str], sink: Any, limit_s: float) -> int | None:
    """Run `command` in a session of its own; past `limit_s`, kill it with everything it
    started (krung's judges and workers would go on into the suite, which needs the GPU).
    Its exit status, or None when it was killed."""
    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO,
                               start_new_session=True)
    try:
        return process.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None


def gather_logs(out: Path, pattern: str, into: str) -> None:
    with (out / into).open("w") as sink:
        for log in sorted(out.glob(pattern)):
            if log.name != into:
                sink.write(f"===== {log.name}\n{log.read_text(errors='replace')}\n")
                log.unlink()


def run_logs(run_dir: Path, chars: int = 3000) -> str:
    """The ends of a run's judge and worker logs, for a run that did not go as expected."""
    return "".join(f"----- {log.name}\n{log.read_text(errors='replace')[-chars:]}\n"
                   for log in sorted(run_dir.glob("*.log")))


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
    env = {**os.environ, "KRUNG_STORE": str(folder / "krung.db"), "KRUNG_RUN_TIMEOUT": "100"}
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
    with (out / "suite_failures.log").open("w") as sink:  # what the failed ones' logs say
        for p in problems:
            if not p["correct"] and p["run_id"]:
                sink.write(f"===== {p['problem']}\n{run_logs(folder / 'runs' / p['run_id'])}")
    return {"problems": len(problems), "minutes": round(minutes, 2),
            "per_min": round(len(problems) / minutes, 1), **suite_waits(folder),
            "scores": suite["scores"],
            "correct": sum(bool(p["correct"]) for p in problems),
            "crashes": suite["scores"].get("krung_errors", 0) + len(marks), "marks": marks,
            "not_correct": [f"{p['problem']}: {p['verdict']} ({p['reason']})"
                            for p in problems if not p["correct"]]}


def suite_waits(folder: Path) -> dict:
    """Where a suite's runs waited before their first rung: how many judges its service
    handed out still starting (each costs its run torch's import and CUDA's start), and the
    median of each step the judges took before the first rung (from its store's runs)."""
    from krung.host import service

    handed = [state for _, state in service.handed_out(folder / "krung.db")]
    try:
        with contextlib.closing(sqlite3.connect(f"file:{folder / 'krung.db'}?mode=ro",
                                                uri=True)) as store:
            envs = [env for (env,) in store.execute("SELECT env FROM runs")]
    except sqlite3.Error:  # no store, or no runs in it: nothing to tell
        envs = []
    steps: dict[str, list[float]] = {}
    for env in envs:
        for step, seconds in (json.loads(env).get("before_rungs_s") or {}).items():
            steps.setdefault(step, []).append(seconds)
    return {"judges_ready": handed.count("ready"), "judges_starting": handed.count("starting"),
            "before_rungs_median_s": {step: round(statistics.median(s), 2)
                                      for step, s in steps.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=Path, default=REPO / ".gpu" / "problem_sets.tar.gz")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/krung-gate")))
    parser.add_argument("--suite", type=int, default=20, help="level-1 problems in the suite")
    parser.add_argument("--jobs", type=int, default=2, help="corpus runs at once, per mode")
    parser.add_argument("--test-workers", type=int, default=6, help="pytest processes at once")
    # 410 + 160 s fit the device's 600 s call, with a little margin (the tests' collection is
    # inside the first)
    parser.add_argument("--limit", type=float, default=410,
                        help="seconds for the corpus and the tests, at once; the suite follows")
    parser.add_argument("--suite-limit", type=float, default=160, help="seconds for the suite")
    parser.add_argument("--runs", type=int, default=50, help="corpus runs, half cold, half warm")
    parser.add_argument("--device", default="cuda",
                        help="cpu: try the corpus part, or a --rest's tests, here")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"which of {', '.join(PARTS)} to run (comma-separated)")
    parser.add_argument("--rest", type=Path, metavar="FILE",
                        help=f"run only the tests and corpus runs a gate did not finish (its "
                             f"$OUT/{REST})")
    parser.add_argument("--durations", type=Path, default=DURATIONS,
                        help="each test's seconds, to start the longest chunks first")
    parser.add_argument("--learn-durations", type=Path, metavar="LOG",
                        help="put the seconds of a gate's tests.log into --durations, and stop")
    parser.add_argument("--record", type=Path, default=RECORD,
                        help="the file the gate's line is appended to")
    args = parser.parse_args()
    if args.learn_durations:
        learned = learn_durations(args.learn_durations, args.durations)
        print(f"{len(learned)} tests' seconds in {args.durations}")
        return
    rest = read_rest(args.rest, parser.error) if args.rest else None
    rest_runs = [corpus_job(n) for n in rest or [] if n.startswith(CORPUS + " ")]
    if rest is not None:
        rest = [n for n in rest if not n.startswith(CORPUS + " ")]
        parts = ["tests"] * bool(rest) + ["corpus"] * bool(rest_runs)
    else:
        parts = [p for p in args.parts.split(",") if p]
    if not parts or set(parts) - set(PARTS):
        parser.error(f"--parts takes some of {', '.join(PARTS)}, comma-separated")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "corpus.jsonl").unlink(missing_ok=True)  # this gate's rows only
    scratch = Path(tempfile.mkdtemp(prefix="krung-gate-"))
    atexit.register(shutil.rmtree, scratch, True)  # its stores: what came back is in --out
    started = time.monotonic()
    versions = corpus(args.runs // 2) if "corpus" in parts and args.rest is None else []
    # a rest's runs as they were left; a gate's, cold and warm in turn
    jobs = rest_runs or interleaved([(p, v, ok, mode) for mode in ("cold", "warm")
                                     for p, v, ok in versions])
    rows: list[dict] = []
    lock = threading.Lock()

    def one(job: tuple[str, str, bool, str]) -> None:
        left = args.limit - (time.monotonic() - started)
        row = {"problem": Path(job[0]).name, "version": Path(job[1]).name, "mode": job[3],
               "as_expected": False, "crash": False}
        if left <= 0:  # out of time: not run, left for `--rest`
            row.update(skipped="out of the gate's time", not_finished=corpus_line(job))
        else:  # a CUDA C++ build beside the tests takes minutes: slow, not hung
            try:
                row = ladder_run(*job, scratch, args.device, min(RUN_LIMIT_S, max(60, left)))
            except Exception as exc:  # the gate's own bug: one failed row, not a lost report
                row["skipped"] = f"the gate failed on it: {type(exc).__name__}: {exc}"
        with lock, (args.out / "corpus.jsonl").open("a") as sink:
            rows.append(row)
            sink.write(json.dumps(row) + "\n")

    def chunk(index: int, nodes: list[str]) -> dict:
        return run_tests(nodes, index, args.out, args.limit - (time.monotonic() - started))

    # The corpus and the tests at once (neither needs much GPU memory), then the suite
    # alone: at declared sizes its problems need the whole GPU.
    on_gpu = args.device == "cuda" and _device() != "no GPU"
    tests_here = "tests" in parts and (on_gpu or (rest is not None and args.device == "cpu"))
    durations = read_durations(args.durations)
    chunks = ([] if not tests_here else
              rest_tests(rest, durations) if rest is not None else gpu_tests(durations))
    with (concurrent.futures.ThreadPoolExecutor(args.test_workers) as test_pool,
          concurrent.futures.ThreadPoolExecutor(2 * args.jobs) as corpus_pool):
        tests = [test_pool.submit(chunk, i, nodes) for i, nodes in enumerate(chunks)]
        list(corpus_pool.map(one, jobs))
        test_results = [t.result() for t in tests]
    gather_logs(args.out, "tests*.log", "tests.log")  # one file: a device call returns few
    if "suite" not in parts:
        suite_result = {"problems": 0, "per_min": 0.0, "crashes": 0, "why": "not asked for"}
    elif not (args.sets.exists() and on_gpu):  # asked for and cannot run: not passed
        suite_result = {"problems": 0, "per_min": 0.0, "crashes": 0, "killed": True,
                        "why": "no --sets or no GPU"}
    else:
        try:
            suite_result = run_suite(args.sets, args.suite, args.out, scratch, args.suite_limit)
        except Exception as exc:  # the gate's own bug: a failed suite, not a lost report
            suite_result = {"problems": 0, "per_min": 0.0, "crashes": 0, "killed": True,
                            "why": f"{type(exc).__name__}: {exc}"}
    if "tests" in parts and not tests_here:  # asked for and cannot run: not passed
        test_results = [{"passed": 0, "failed": 1, "skipped": 0, "nodes": 0, "not_finished": [],
                         "failures": ["the gpu tests need a GPU (--device cuda)"]}]
    which = "" if set(parts) == set(PARTS) else f" ({', '.join(parts)} only)"
    title = "gpu gate rest" if rest is not None else f"gpu gate{which}"
    passed = report(rows, test_results, suite_result, args.out, time.monotonic() - started,
                    parts, title, args.record)
    sys.exit(0 if passed else 1)


def read_rest(path: Path, error: Any) -> list[str]:
    """The nodes of a gate's gate-rest.txt. It completes only the gate of its own commit:
    one from another commit is refused (`error`, the parser's) before anything runs."""
    lines = path.read_text().splitlines() if path.exists() else []
    nodes = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    commit = next((line.split(":", 1)[1].strip() for line in lines
                   if line.startswith("# commit:")), None)
    if not nodes:
        error(f"{path}: no tests to run (a gate writes its $OUT/{REST} when some were not "
              f"finished)")
    if commit and not same_commit(commit, _commit()):
        error(f"{path} is the rest of the gate at {commit}, this checkout is {_commit()}: "
              f"run it on the gate's commit (or the whole gate again)")
    return nodes


def report(rows: list[dict], tests: list[dict], suite: dict, out: Path, wall_s: float,
           parts: list[str], title: str = "gpu gate", record: Path = RECORD) -> bool:
    """Print and record (in `record`, GPU_GATE.md, and $OUT/GPU_GATE.line) the gate's result,
    and name the tests it did not finish in $OUT/gate-rest.txt; whether it passed: nothing
    failed, no crash, every test finished."""
    lines = []
    left = [r for r in rows if r.get("not_finished")]  # corpus runs the clock left
    rows = [r for r in rows if not r.get("not_finished")]
    lines += [f"corpus NOT FINISHED {r['mode']} {r['problem']} {r['version']} ({r['skipped']})"
              for r in left]
    for row in sorted(rows, key=lambda r: (r["as_expected"], r["problem"])):
        if not row["as_expected"]:
            lines.append(f"corpus NOT AS EXPECTED {row['mode']} {row['problem']} "
                         f"{row['version']}: exit {row.get('exit')} outcome {row.get('outcome')} "
                         f"{row.get('failed') or ''} {row.get('crash_why') or ''}"
                         f"{row.get('skipped') or ''} {row.get('stderr', '')[-300:]}")
    for index, chunk in enumerate(tests):  # the chunk's log: tests{index:02d}.log
        lines += [f"tests{index:02d} FAILED {name}" for name in chunk["failures"]]
        lines += [f"tests{index:02d} NOT FINISHED {name} ({chunk['why']})"
                  for name in chunk["not_finished"]]
    unfinished = [name for chunk in tests for name in chunk["not_finished"]]
    unfinished += [r["not_finished"] for r in left]
    lines += [f"suite not correct: {line}" for line in suite.get("not_correct", [])]
    lines += [f"suite crash mark: {m}" for m in suite.get("marks", [])]
    by_mode = {m: [r for r in rows if r["mode"] == m] for m in ("cold", "warm")}
    for mode, found in by_mode.items():
        if any("wall_s" in r for r in found):
            lines.append(f"corpus {mode}: {len(found)} runs, {where_time_went(found)}")
    if tests:
        lines.append(f"tests: {sum(t['nodes'] for t in tests)} in {len(tests)} pytest processes, "
                     f"{sum(t['passed'] for t in tests)} passed, "
                     f"{sum(t['failed'] for t in tests)} failed, {len(unfinished)} not finished, "
                     f"{sum(t['skipped'] for t in tests)} skipped (in tests.log)")
    if "suite" in parts:
        lines.append(f"suite: {json.dumps({k: v for k, v in suite.items() if k != 'not_correct'})}")
    # An honest baseline the suite did not judge correct, or a suite cut short, fails the gate.
    suite_failed = len(suite.get("not_correct", [])) + bool(suite.get("killed"))
    passed = (sum(r["as_expected"] for r in rows) + sum(t["passed"] for t in tests)
              + suite.get("correct", 0))
    failed = (sum(not r["as_expected"] for r in rows) + sum(t["failed"] for t in tests)
              + suite_failed)
    crashes = sum(r["crash"] for r in rows) + suite["crashes"]
    counts = [f"{passed} passed", f"{failed} failed"]
    counts += [f"{len(unfinished)} not finished"] * bool({"tests", "corpus"} & set(parts))
    counts += [f"{crashes} krung crashes"] * bool({"corpus", "suite"} & set(parts))
    counts += [f"suite {suite['per_min']} problems/min"] * ("suite" in parts)
    last = f"{title}: {', '.join(counts)}"
    if unfinished:  # the next device call, on this commit, finishes them (gpu_check.sh gate-rest)
        (out / REST).write_text(f"# not finished in the {title} ({len(unfinished)})\n"
                                f"# commit: {_commit()}\n" + "\n".join(unfinished) + "\n")
        lines.append(f"{len(unfinished)} tests or runs not finished, in {out / REST}: carry it as "
                     f".gpu/{REST} and run scripts/gpu_check.sh gate-rest on this commit")
    else:
        (out / REST).unlink(missing_ok=True)
    lines += [f"gate wall time {wall_s:.0f} s", last]
    text = "\n".join(lines) + "\n"
    (out / "gate.txt").write_text(text)
    print(text, end="")
    entry = f"- {datetime.date.today()} {_commit()} {_device()}: {last}\n"
    (out / "GPU_GATE.line").write_text(entry)
    with record.open("a") as gate:
        gate.write(entry)
    return failed == 0 and crashes == 0 and not unfinished


def where_time_went(rows: list[dict]) -> str:
    """The runs' median wall time, in their rungs and outside them, and the median of each
    step the judge took before the first rung: where a gate slower than the last one lost it."""
    timed = [r for r in rows if "wall_s" in r]
    walls = [r["wall_s"] for r in timed]
    text = f"median {statistics.median(walls):g} s, max {max(walls):g} s"
    inside = [r["in_rungs_s"] for r in timed if "in_rungs_s" in r]
    if inside:
        outside = [r["wall_s"] - r["in_rungs_s"] for r in timed if "in_rungs_s" in r]
        text += (f"; in the rungs median {statistics.median(inside):.1f} s, outside them "
                 f"{statistics.median(outside):.1f} s")
    steps: dict[str, list[float]] = {}
    for row in timed:
        for step, seconds in (row.get("before_rungs_s") or {}).items():
            steps.setdefault(step, []).append(seconds)
    if steps:
        text += "; before the rungs (median s) " + ", ".join(
            f"{step} {statistics.median(s):.2f}" for step, s in steps.items())
    return text


def same_commit(a: str, b: str) -> bool:
    """Whether two names are of one commit: a full hash and its short form are
    (KRUNG_GATE_COMMIT is often the full one, git's HEAD here the short)."""
    return min(len(a), len(b)) >= 7 and (a.startswith(b) or b.startswith(a))


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
