"""A suite: every problem in a directory that has a solution, evaluated and scored the way
KernelBench scores a run over its levels.

Problems are the entries of one directory in any format krung reads (KernelBench files, GPU
MODE directories, krung's own problem directories); a problem's solution is the file in the
solutions directory with the problem's name (`19_ReLU.py` for `19_ReLU.py`, `vectoradd_py.py`
for the directory `vectoradd_py`). Each pair climbs the whole ladder and is recorded like any
run. KernelBench's scores, over the n problems that have a solution:

- correctness rate: the fraction that are correct (for krung: every rung passed, so a
  version that is right on the declared shapes but fails unseen cases, determinism or the
  timed-output checks is not correct; and the correctness rung ran, and the benchmark when
  the suite is timed: a check skipped on a machine without a GPU verifies nothing);
- fast_p: the fraction that are correct *and* faster than the reference by more than p
  (speedup = reference time / version time, krung's benchmark geomean over bench cases);
  fast_0 is the correct ones that were timed, fast_1 those faster than the reference;
- the geometric mean of the speedups of the correct ones.

A problem where krung itself failed (its judge died on both tries, or the run passed its
deadline, KRUNG_RUN_TIMEOUT) has no verdict: it is left out of the scores and counted apart
(`krung_errors`). While problems run, `on_running` hears every 30 s which, for how long, and
at which step.

Runs in the caller's process: it never imports torch, a problem or a version.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krung.host.scale import Executor, Job, Running
from krung.host.scale.local import LocalExecutor
from krung.host.store import Store
from krung.judge.ladder import select
from krung.judge.problem import (
    GPUMODE_FILES,
    KERNELBENCH,
    PROBLEM_FILE,
    detect_format,
    kernelbench_missing,
    precision_dtype,
    problem_name,
)
from krung.protocol.errors import UsageError
from krung.protocol.results import Run
from krung.protocol.settings import Settings

FAST_P = (0, 1, 2)


@dataclass
class SuiteEntry:
    """One problem of the suite, its solution and its run (or why it could not run)."""

    problem: str
    problem_path: str
    solution: str
    format: str
    run: Run | None = None
    error: str | None = None  # the problem could not be evaluated (a broken problem, ...)
    timed: bool = False  # the suite benchmarks: a correct entry must have been timed too

    @property
    def correct(self) -> bool:
        """Every rung that ran passed, and the correctness rung was one of them (and the
        benchmark, when the suite is timed): a skipped check verifies nothing."""
        return self.run is not None and self.run.ok and self.unverified() is None

    def unverified(self) -> str | None:
        """Why a run that failed nothing is still not verified: a rung it needs was skipped
        (a CUDA C++ version on a machine without a GPU) or not climbed (--rungs)."""
        assert self.run is not None
        for name in ("correctness", "benchmark") if self.timed else ("correctness",):
            rung = self.run.rung(name)
            if rung is None:
                return f"{name} not climbed (add it to --rungs)"
            if not rung.ok:
                return f"{name} skipped ({rung.reason})" if rung.reason else f"{name} skipped"
        return None

    @property
    def krung_failed(self) -> bool:
        """krung itself failed on it (outcome `error`): no verdict on the solution."""
        return self.run is not None and self.run.error is not None

    @property
    def speedup(self) -> float | None:
        bench = self.run.rung("benchmark") if self.run else None
        return bench.figures.get("speedup") if bench and bench.ok else None

    def verdict(self) -> str:
        if self.error:
            return f"error: {self.error.splitlines()[0]}"
        assert self.run is not None
        if self.run.error:
            return f"krung failed, not the solution: {self.run.error.splitlines()[0]}"
        failed = next((r for r in self.run.rungs if not r.ok and r.status.value == "failed"),
                      None)
        if failed is None:
            unverified = self.unverified()
            if unverified:
                return f"not verified: {unverified}"
            return "ok" if self.run.ok else "skipped"
        return f"{failed.name}: {failed.error_type}"

    def reason(self, limit: int | None = 240) -> str | None:
        """Why it is not ok, in one line: the first defect of a broken problem, the first
        line of a failed rung's message (a verdict alone says only which rung); cut at
        `limit` characters for a terminal's line, whole for JSON (a mismatch's element,
        got and expected, come last)."""
        if self.error:
            text = self.error
        elif self.run and self.run.error:
            text = self.run.error
        else:
            failed = next((r for r in self.run.rungs if not r.ok and r.status.value == "failed"),
                          None) if self.run else None
            text = failed.error if failed else ""
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines and lines[0].endswith(":") and len(lines) > 1:  # "problem P has 1 defect(s):"
            lines = [lines[1].removeprefix("- ")]
        return lines[0][:limit] if lines else None

    def to_json(self) -> dict[str, Any]:
        bench = self.run.rung("benchmark") if self.run else None
        figures = bench.figures if bench and bench.ok else {}
        return {"problem": self.problem, "problem_path": self.problem_path,
                "solution": self.solution, "format": self.format, "correct": self.correct,
                "outcome": self.run.outcome if self.run else "error",
                "verdict": self.verdict(), "reason": self.reason(limit=None),
                "speedup": self.speedup,
                "median_us": figures.get("geomean_us"),
                "run_id": self.run.run_id if self.run else None, "error": self.error}


@dataclass
class SuiteResult:
    problems_dir: str
    solutions_dir: str
    precision: str | None
    timed: bool  # the benchmark rung ran: fast_p and speedups mean something
    entries: list[SuiteEntry] = field(default_factory=list)
    without_solution: list[str] = field(default_factory=list)
    without_problem: list[str] = field(default_factory=list)

    @property
    def scores(self) -> dict[str, Any]:
        """KernelBench's scores over the entries with a verdict; those where krung itself
        failed (`krung_errors`: its judge died twice, or the run's deadline passed) are left
        out and counted apart, so krung's failure never counts as the solution's."""
        judged = [e for e in self.entries if not e.krung_failed]
        found = scores([e.correct for e in judged], [e.speedup for e in judged], self.timed)
        found["krung_errors"] = len(self.entries) - len(judged)
        return found

    @property
    def ok(self) -> bool:
        return bool(self.entries) and all(e.correct for e in self.entries)

    @property
    def krung_failed(self) -> bool:
        return any(e.krung_failed for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {"problems_dir": self.problems_dir, "solutions_dir": self.solutions_dir,
                "precision": self.precision, "scores": self.scores,
                "problems": [e.to_json() for e in self.entries],
                "without_solution": self.without_solution,
                "without_problem": self.without_problem}


def scores(correct: list[bool], speedups: list[float | None], timed: bool = True
           ) -> dict[str, Any]:
    """KernelBench's scores over n problems: correctness rate, fast_p for p in 0, 1, 2 (the
    fraction correct with speedup > p) and the geometric-mean speedup of the correct ones.
    Without timings (`timed` False) the speed scores are None."""
    n = len(correct)
    result: dict[str, Any] = {"problems": n, "correct": sum(correct),
                              "correctness": sum(correct) / n if n else None}
    fast = [s for c, s in zip(correct, speedups, strict=True) if c and s is not None]
    for p in FAST_P:
        result[f"fast_{p}"] = (sum(s > p for s in fast) / n if n else None) if timed else None
    result["geomean_speedup"] = (math.exp(sum(math.log(s) for s in fast) / len(fast))
                                 if fast and timed else None)
    return result


@contextlib.contextmanager
def _every(seconds: float, tell: Callable[[], None] | None) -> Iterator[None]:
    """`tell()` every `seconds` from a thread of its own while the block runs (this process
    holds no CUDA: the evaluations run in judges and workers of their own)."""
    if tell is None:
        yield
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            tell()

    thread = threading.Thread(target=loop, name="krung-suite-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def find_pairs(problems_dir: Path, solutions_dir: Path
               ) -> tuple[list[tuple[Path, Path]], list[str], list[str]]:
    """(problem, solution) pairs matched by name, the problems without a solution, and the
    solution files without a problem."""
    for folder, what in ((problems_dir, "problems"), (solutions_dir, "solutions")):
        if not folder.is_dir():
            raise UsageError(f"{folder} is not a directory",
                             hint=f"give the directory of the {what}")
    problems = suite_problems(problems_dir)
    solutions = {p.stem: p for p in sorted(solutions_dir.glob("*.py"))}
    pairs = [(p, solutions[problem_name(p)]) for p in problems if problem_name(p) in solutions]
    names = {problem_name(p) for p in problems}
    return (pairs, [problem_name(p) for p in problems if problem_name(p) not in solutions],
            [name for name in solutions if name not in names])


def suite_problems(folder: Path) -> list[Path]:
    """The problems directly inside `folder`, in name order, found by their files alone."""
    return [path.resolve() for path in sorted(folder.iterdir())
            if not path.name.startswith((".", "_")) and _is_problem(path)]


def _is_problem(path: Path) -> bool:
    if path.is_dir():
        return (path / PROBLEM_FILE).is_file() or all((path / f).is_file() for f in GPUMODE_FILES)
    return path.suffix == ".py" and not kernelbench_missing(path)


def run_suite(
    problems_dir: str | Path,
    solutions_dir: str | Path,
    *,
    precision: str | None = None,
    rungs: str | list[str] | None = None,
    device: str | None = None,
    store: str | Path | Store | None = None,
    settings: Settings | None = None,
    executor: Executor | None = None,
    on_entry: Callable[[SuiteEntry], None] | None = None,
    on_running: Callable[[list[Running]], None] | None = None,
    every_s: float = 30.0,
) -> SuiteResult:
    """Evaluate every problem of `problems_dir` that has a solution in `solutions_dir` with
    `executor` (default: one at a time, here) and score them. `precision` applies to the
    KernelBench problems. `on_entry` hears of each problem as it ends; `on_running`, every
    `every_s` seconds, of the problems at work (each within KRUNG_RUN_TIMEOUT)."""
    precision_dtype(precision)  # an unknown precision fails before anything runs
    pairs, without_solution, without_problem = find_pairs(Path(problems_dir),
                                                          Path(solutions_dir))
    if not pairs:
        raise UsageError(f"no problem in {problems_dir} has a solution in {solutions_dir}",
                         hint="a solution is matched by name: 19_ReLU.py solves the KernelBench "
                              "file 19_ReLU.py, vectoradd_py.py the directory vectoradd_py")
    names = select(rungs)
    result = SuiteResult(str(problems_dir), str(solutions_dir), precision,
                         timed="benchmark" in names, without_solution=without_solution,
                         without_problem=without_problem)
    settings = settings or Settings.from_env()
    if store is not None:
        settings = settings.replace(store=store.path if isinstance(store, Store) else store)
    entries: dict[Job, SuiteEntry] = {}
    for problem, solution in pairs:
        kind = detect_format(problem)
        job = Job(problem=str(problem), solution=str(solution), rungs=",".join(names),
                  device=device, precision=precision if kind == KERNELBENCH else None)
        entries[job] = SuiteEntry(problem_name(problem), str(problem), str(solution), kind,
                                  timed=result.timed)
    executor = executor or LocalExecutor()
    # A broken problem is an outcome with an error: the suite goes on without it.
    with _every(every_s, on_running and (lambda: on_running(executor.running()))):
        for outcome in executor.map(list(entries), settings):
            entry = entries[outcome.job]
            entry.run, entry.error = outcome.run, outcome.error
            if on_entry:
                on_entry(entry)
    result.entries = list(entries.values())  # in the problems' order
    return result
