"""`evaluate`: one version of one problem up the ladder, recorded in the store.

Runs in the caller's process, which never imports the version, the problem or even torch: it
starts a judge process, streams the rung results it sends into the store and to the caller,
and keeps a watchdog on it. If the judge dies, the run is still recorded, with why.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from krung.host.store import Store
from krung.judge.candidate import LOG_TAIL_BYTES
from krung.judge.ladder import select
from krung.judge.problem import (
    KERNELBENCH,
    detect_format,
    find_problem,
    precision_dtype,
    problem_name,
)
from krung.judge.solution import read_solution
from krung.protocol.channel import ChannelClosed, spawn
from krung.protocol.errors import KrungError, ProblemError, UsageError
from krung.protocol.results import Run, RungResult
from krung.protocol.settings import Settings

OnResult = Callable[[RungResult], None]
OnProgress = Callable[[str, str], None]
OnEnv = Callable[[dict], None]


def evaluate(
    problem: str | Path,
    solution: str | Path,
    *,
    rungs: str | list[str] | None = None,
    device: str | None = None,
    store: str | Path | Store | None = None,
    seed: int | None = None,
    precision: str | None = None,
    settings: Settings | None = None,
    on_result: OnResult | None = None,
    on_progress: OnProgress | None = None,
    on_env: OnEnv | None = None,
    parent: str | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """Climb the ladder for `solution` on `problem` and return the recorded Run.

    `problem` is a problem in any format krung reads (a directory with problem.py, a
    KernelBench file, a GPU MODE directory) or a built-in name; `precision` (fp32, fp16,
    bf16) casts a KernelBench problem's inputs and weights. The run's parent is the run
    `parent` names (an id or a unique prefix), or else the previous run of the same version
    file on this problem. `env` adds variables to the judge's and the worker's environment
    (an executor pins a GPU with CUDA_VISIBLE_DEVICES this way). Raises ProblemError when
    the problem is broken and UsageError for bad arguments; a version that fails, crashes or
    hangs is a Run whose rung says so, never an exception.
    """
    settings = (settings or Settings.from_env()).replace(device=device)
    problem_dir = find_problem(problem)
    precision_dtype(precision)  # an unknown precision is a usage error here, not in the judge
    if precision is not None and detect_format(problem_dir) != KERNELBENCH:
        raise UsageError(f"--precision applies to KernelBench problems; {problem_dir} is in "
                         f"{detect_format(problem_dir)} format, whose cases name their dtypes",
                         hint="drop --precision")
    version = read_solution(solution)
    names = select(rungs)
    owned = not isinstance(store, Store)
    db = store if isinstance(store, Store) else Store(store or settings.store)
    run = Run(run_id="", problem=problem_name(problem_dir, precision, settings.scale),
              problem_path=str(problem_dir),
              solution=str(version.path), source_sha256=version.sha256, source=version.source,
              seed=seed if seed is not None else secrets.randbits(63))
    try:
        run.parent = _parent(db, parent, run)
        db.begin(run, names)
        request = {
            "problem": str(problem_dir), "solution": str(version.path), "rungs": names,
            "device": settings.device, "seed": run.seed, "precision": precision,
            "run_dir": str(db.artifacts_dir(run.run_id)),
            "settings": {k: str(v) if isinstance(v, Path) else v
                         for k, v in settings.__dict__.items()},
            # The roofline rung reads the device's ceilings measured before, if any.
            "calibrations": db.calibrations() if "roofline" in names else [],
        }
        _drive_judge(run, db, request, settings, on_result, on_progress, on_env, env or {})
        db.finish(run)
        return run
    finally:
        if owned:
            db.close()


def _parent(db: Store, named: str | None, run: Run) -> str | None:
    if named is None:
        return db.previous_run(run.problem, run.solution, run.problem_path)
    found = db.get(named)
    if found.problem != run.problem:
        raise UsageError(f"run {found.run_id} is of problem {found.problem}, not {run.problem}",
                         hint=f"name a run of {run.problem} as the parent (`krung history "
                              f"{run.problem}` lists them)")
    return found.run_id


def _drive_judge(run: Run, db: Store, request: dict, settings: Settings,
                 on_result: OnResult | None, on_progress: OnProgress | None,
                 on_env: OnEnv | None, env: dict[str, str]) -> None:
    run_dir = Path(request["run_dir"])
    process, channel = spawn("krung.judge.serve", [], log=run_dir / "judge.log",
                             env=dict(os.environ, PYTHONUNBUFFERED="1", **env))
    # The judge reports at least once per step, and each step has its own timeout there.
    silence_limit = max(settings.compile_timeout_s, settings.call_timeout_s,
                        settings.bench_timeout_s) + 120
    worker_pid = None
    try:
        channel.send(request)
        while True:
            if not channel.poll(silence_limit):
                process.kill()
                raise _JudgeFailed(f"the judge sent nothing for {silence_limit:g} s and was "
                                   "killed")
            message = channel.recv()
            kind = message.get("type")
            if kind == "env":
                run.env.update(message["env"])
                worker_pid = run.env.get("worker_pid", worker_pid)
                run.device = run.env.get("device_name", run.device)
                db.update_env(run)
                if on_env and "device" in message["env"]:
                    on_env(run.env)
            elif kind == "calibration":
                db.save_calibration(message["entry"])
            elif kind == "progress" and on_progress:
                on_progress(message["rung"], message["message"])
            elif kind == "rung":
                result = RungResult.from_json(message["result"])
                run.rungs.append(result)
                db.add_rung(run.run_id, len(run.rungs) - 1, result)
                if on_result:
                    on_result(result)
            elif kind == "problem_error":
                db.discard(run.run_id)
                raise ProblemError(request["problem"], [tuple(d) for d in message["defects"]])
            elif kind == "error":
                if message.get("usage"):
                    db.discard(run.run_id)
                    raise UsageError(message["message"], hint=message.get("hint"))
                raise _JudgeFailed(message["message"], message.get("details"))
            elif kind == "done":
                break
    except ChannelClosed:
        code = process.wait()
        run.error = (f"the judge process exited with status {code} before the evaluation "
                     f"ended; its log ends with:\n{_tail(run_dir / 'judge.log')}")
    except _JudgeFailed as exc:
        run.error = str(exc) + (f"\n{exc.details}" if exc.details else "")
    finally:
        _stop(process, worker_pid if run.error else None)
        channel.close()


class _JudgeFailed(KrungError):
    def __init__(self, message: str, details: str | None = None):
        super().__init__(message)
        self.details = details


def _stop(process: subprocess.Popen, worker_pid: int | None) -> None:
    """End the judge and, should it have left one behind, its worker's process group."""
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if worker_pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker_pid, signal.SIGKILL)


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-LOG_TAIL_BYTES:]
    except OSError:
        return ""
    return data.decode(errors="replace")
