"""`evaluate`: one version of one problem up the ladder, recorded in the store.

Runs in the caller's process, which never imports the version, the problem or even torch: it
takes a judge process (a warm one from the store's service, krung.host.service, else it starts
one), streams the rung results it sends into the store and to the caller, and keeps a watchdog
on it: the judge says something every few seconds, so one that goes silent is killed within
SILENCE_S, and one whose heartbeat goes on while nothing else moves for longer than any step
may take (a problem's reference that never returns) is killed too. If the judge dies, the run
is still recorded, with why. Ctrl-C (or SIGTERM, where this is the main thread) stops the judge
and its worker at once and records the run as interrupted, with the rungs done by then and
where it was stopped; then krung.Interrupted, a KeyboardInterrupt carrying the run, goes on up.

A judge that fails (or raises inside a rung: InternalError, an exception of krung's or the
problem's code, such as the reference running out of GPU memory) is krung's failure, not the
version's (the version runs in the worker alone): the evaluation runs once more in fresh
processes with the optional instrumentation off (`_second_try`), and only then is the run
recorded with its error (`outcome: error`, exit 3).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from krung.host import grading, service
from krung.host.store import Store
from krung.judge import forks
from krung.judge.candidate import LOG_TAIL_BYTES
from krung.judge.ladder import select
from krung.judge.problem import (
    KERNELBENCH,
    detect_format,
    find_problem,
    precision_dtype,
    problem_name,
)
from krung.judge.problem.files import problem_files
from krung.judge.solution import read_solution
from krung.protocol import messages
from krung.protocol.channel import Channel, ChannelClosed, spawn
from krung.protocol.errors import Interrupted, KrungError, ProblemError, UsageError
from krung.protocol.results import INTERNAL_ERROR, INTERRUPTED, Run, RungResult
from krung.protocol.settings import Settings

OnResult = Callable[[RungResult], None]
OnProgress = Callable[[str, str], None]
OnEnv = Callable[[dict], None]

JUDGE_START_S = 300.0  # for the judge's first word: a cold one imports torch before it
SILENCE_S = 45.0  # then it speaks every few seconds (krung.judge.serve.HEARTBEAT_S)


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
    file on this problem. `settings.graded` refuses what would bend the grading
    (krung.host.grading). `env` adds variables to the judge's and the worker's environment
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
    if settings.graded:
        grading.refuse_bending(settings, names, seed)
    files = problem_files(problem_dir)
    owned = not isinstance(store, Store)
    db = store if isinstance(store, Store) else Store(store or settings.store)
    run = Run(run_id="", problem=problem_name(problem_dir, precision, settings.scale),
              problem_path=str(problem_dir),
              solution=str(version.path), source_sha256=version.sha256, source=version.source,
              seed=seed if seed is not None else secrets.randbits(63),
              env=grading.recorded(settings, seed, files))
    try:
        if settings.graded:
            run.env["problem_pinned_at"] = grading.check_pin(db, problem_dir, files)
        run.parent = _parent(db, parent, run)
        db.begin(run, names)
        db.update_env(run)
        run_dir = db.artifacts_dir(run.run_id).resolve()
        copy = run_dir / "version" / version.name  # the bytes read here, which judge and
        copy.parent.mkdir(exist_ok=True)  # worker load: all see what the store records
        copy.write_bytes(version.data)
        request = messages.Request(
            problem=str(problem_dir), solution=str(version.path), version=str(copy),
            sha256=version.sha256, rungs=names,
            device=settings.device, seed=run.seed, precision=precision,
            run_dir=str(run_dir), cwd=os.getcwd(),
            settings=_shared(settings),
            # The roofline rung reads the device's ceilings measured before, if any.
            calibrations=db.calibrations() if {"roofline", "profile"} & set(names) else [])
        with _sigterm_interrupts():
            deadline = time.monotonic() + settings.run_timeout_s
            interrupted, again = _drive_judge(run, db, request, settings, on_result,
                                              on_progress, on_env, env or {}, deadline)
            if again:  # krung's own failure: once more, plainer
                request, settings = _second_try(run, db, request, settings, on_progress)
                interrupted, _ = _drive_judge(run, db, request, settings, on_result,
                                              on_progress, on_env, env or {}, deadline)
        db.finish(run)
        if interrupted:
            raise Interrupted(run)
        return run
    finally:
        if owned:
            db.close()


def _second_try(run: Run, db: Store, request: messages.Request, settings: Settings,
                on_progress: OnProgress | None) -> tuple[messages.Request, Settings]:
    """Ready the run for its second try after the judge failed (died, fell silent, raised,
    or its worker died before any version code ran): no version code runs in the judge, so
    that is krung's failure (or CUPTI's, or the driver's), never a verdict. The second try
    runs in fresh processes (a cold judge: no service, no fork server), with the optional instrumentation
    off (the kernel census: delegation may be undecided, and says so); the first try's error
    and logs are kept (`env.first_try`, judge.1.log, worker.1.log)."""
    run_dir = Path(request.run_dir)
    for log in ("judge.log", "worker.log"):
        with contextlib.suppress(OSError):
            os.replace(run_dir / log, run_dir / log.replace(".log", ".1.log"))
    first = (run.error or "").strip()
    run.env["first_try"] = {"error": first.splitlines()[0] if first else "",
                            "rungs_done": [r.name for r in run.rungs],
                            "logs": "judge.1.log, worker.1.log"}
    run.error = None
    run.rungs.clear()
    db.clear_rungs(run.run_id)
    db.update_env(run)
    if on_progress:  # what failed, so a suite's progress lines tell memory from a crash
        why = run.env["first_try"]["error"][:200]
        on_progress("krung", f"krung's judge failed, not the version ({why}); trying once more "
                             "in fresh processes with the kernel census off")
    settings = settings.replace(service="off", judge_forks="", kernel_census=False)
    return dataclasses.replace(request, settings=_shared(settings)), settings


def _shared(settings: Settings) -> dict[str, object]:
    """The settings as they travel to the judge."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in settings.__dict__.items()}


def _parent(db: Store, named: str | None, run: Run) -> str | None:
    if named is None:
        return db.previous_run(run.problem, run.solution, run.problem_path)
    found = db.get(named)
    if found.problem != run.problem:
        raise UsageError(f"run {found.run_id} is of problem {found.problem}, not {run.problem}",
                         hint=f"name a run of {run.problem} as the parent (`krung history "
                              f"{run.problem}` lists them)")
    return found.run_id


class Judge(Protocol):
    """A judge process this evaluation talks to: started here (cold) or handed over by the
    service (krung.host.service.LeasedJudge)."""

    channel: Channel
    pid: int
    origin: str

    def exit_status(self, timeout: float) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def reap(self) -> None: ...


class ColdJudge:
    """A judge started here, for this evaluation."""

    origin = "cold"

    def __init__(self, spec: service.JudgeSpec, run_dir: Path):
        log = run_dir / "judge.log"
        # Its own session: Ctrl-C in the terminal reaches this process, which stops the judge
        # and everything it started, rather than the judge alone.
        self.process, self.channel = spawn("krung.judge",
                                           spec.args(log, run_dir / "worker.log"), log=log,
                                           env=spec.env, new_session=True)
        self.pid = self.process.pid

    def exit_status(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def reap(self) -> None:
        self.process.wait()


def _take_judge(settings: Settings, store: Path, run_dir: Path, env: dict[str, str]) -> Judge:
    spec = service.JudgeSpec.of(settings, env)
    log = run_dir / "judge.log"
    return (service.acquire(settings.service, store, spec)
            or forks.fork_judge(settings.judge_forks, spec.device,
                                spec.args(log, run_dir / "worker.log"), spec.env, log)
            or ColdJudge(spec, run_dir))


def _drive_judge(run: Run, db: Store, request: messages.Request, settings: Settings,
                 on_result: OnResult | None, on_progress: OnProgress | None,
                 on_env: OnEnv | None, env: dict[str, str], deadline: float
                 ) -> tuple[bool, bool]:
    """Send the request to a judge and record what it sends, until `deadline` (monotonic);
    whether it was interrupted, and whether krung's own failure ended it (worth a second
    try: not an interruption, not the deadline)."""
    run_dir = Path(request.run_dir)
    try:
        judge = _take_judge(settings, db.path, run_dir, env)
    except KeyboardInterrupt:  # a judge half taken sees its channel close, and ends
        run.error = f"{INTERRUPTED} before the evaluation began"
        return True, False
    run.env["judge"] = judge.origin
    worker_pid = None
    limit, stop_within = JUDGE_START_S, 15.0
    # Each step of the judge has its own timeout there; a step longer than all of them hangs.
    stall_limit = max(settings.compile_timeout_s, settings.call_timeout_s,
                      settings.bench_timeout_s) + 120
    moved_at = time.monotonic()
    interrupted = again = False
    at = "before its first rung"  # where the judge was, as its progress said
    try:
        judge.channel.send(request)
        while True:
            left = deadline - time.monotonic()
            if not judge.channel.poll(max(min(limit, left), 0)):
                stop_within = 0
                if left <= limit:
                    raise _past_deadline(settings, at)
                raise _JudgeFailed(f"the judge sent nothing for {limit:g} s and was killed")
            message = judge.channel.recv(expect=messages.FROM_JUDGE)
            if not isinstance(message, messages.Ready):  # a judge handed over before it
                limit = SILENCE_S  # was warm says so when it is
            if not (isinstance(message, messages.Progress) and message.heartbeat):
                moved_at = time.monotonic()
            elif time.monotonic() - moved_at > stall_limit:
                stop_within = 0
                raise _JudgeFailed(f"the judge was stuck for {stall_limit:g} s, longer than "
                                   f"any step may take, and was killed; it was at "
                                   f"[{message.rung}] {message.message}")
            if time.monotonic() > deadline:
                stop_within = 0
                raise _past_deadline(settings, at)
            if isinstance(message, messages.Env):
                run.env.update(message.env)
                worker_pid = run.env.get("worker_pid", worker_pid)
                run.device = run.env.get("device_name", run.device)
                db.update_env(run)
                if on_env and "device" in message.env:
                    on_env(run.env)
            elif isinstance(message, messages.Calibration):
                db.save_calibration(message.entry)
            elif isinstance(message, messages.Progress):
                at = f"at [{message.rung}] {message.message}"
                if on_progress:
                    on_progress(message.rung, message.message)
            elif isinstance(message, messages.RungDone):
                result = RungResult.from_json(message.result)
                run.rungs.append(result)
                done = {r.name for r in run.rungs}  # until the next rung's progress says more
                at = next((f"in the {name} rung" for name in request.rungs if name not in done),
                          "at the end")
                db.add_rung(run.run_id, len(run.rungs) - 1, result)
                if on_result:
                    on_result(result)
                if result.error_type == INTERNAL_ERROR:  # the judge's code raised: krung's
                    stop_within = 0
                    raise _JudgeFailed(f"krung failed in the {result.name} rung, not the "
                                       f"version: {result.error}", result.details)
            elif isinstance(message, messages.ProblemFailed):
                db.discard(run.run_id)
                raise ProblemError(request.problem, [(what, fix) for what, fix in message.defects])
            elif isinstance(message, messages.JudgeFailed):
                if message.usage:
                    db.discard(run.run_id)
                    raise UsageError(message.message, hint=message.hint)
                raise _JudgeFailed(message.message, message.details)
            elif isinstance(message, messages.Done):
                break
    except ChannelClosed:
        code = judge.exit_status(10)
        how = f"exited with status {code}" if code is not None else f"(pid {judge.pid}) ended"
        run.error = (f"the judge process {how} before the evaluation ended; its log ends "
                     f"with:\n{_judge_log_tail(judge, run_dir)}")
        again = True
    except messages.ProtocolError as exc:  # the judge is krung's own: a bug, or mixed code
        stop_within = 0
        run.error = f"the judge sent a message krung does not declare: {exc}"
        again = True
    except _JudgeFailed as exc:
        run.error = str(exc) + (f"\n{exc.details}" if exc.details else "")
        again = exc.retry
    except KeyboardInterrupt:
        interrupted = True
        run.error = (f"{INTERRUPTED} {at}; the judge and its worker were stopped, the rungs "
                     "before were recorded")
        judge.terminate()  # it kills its worker and whatever else it started
        stop_within = 1.0
    finally:
        _stop(judge, worker_pid if run.error else None, stop_within)
    return interrupted, again


class _JudgeFailed(KrungError):
    """The judge failed (`retry`: krung's own failure, worth a second try) or the
    evaluation ran out of time."""

    def __init__(self, message: str, details: str | None = None, retry: bool = True):
        super().__init__(message)
        self.details = details
        self.retry = retry


def _past_deadline(settings: Settings, at: str) -> _JudgeFailed:
    return _JudgeFailed(f"the evaluation ran past its deadline (KRUNG_RUN_TIMEOUT="
                        f"{settings.run_timeout_s:g} s) and was stopped {at}", retry=False)


def _stop(judge: Judge, worker_pid: int | None, within_s: float) -> None:
    """Let the judge end by itself within `within_s` (it does, once it has sent `done` or
    its error, or been told to stop), else kill it with its process group; then the worker's
    process group too, should the judge have left one behind."""
    if not _closed(judge.channel, within_s):
        judge.kill()
    judge.channel.close()
    judge.reap()
    if worker_pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker_pid, signal.SIGKILL)


def _closed(channel: Channel, within_s: float) -> bool:
    """Whether the other end closes (its process ends) within `within_s`; what it still
    sends meanwhile is dropped."""
    deadline = time.monotonic() + within_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not channel.poll(left):
            return False
        try:
            channel.recv()
        except (ChannelClosed, ValueError):
            return True


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM ends the evaluation as Ctrl-C does, where this is the main thread and nothing
    else handles SIGTERM (a signal handler can only be set there)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _judge_log_tail(judge: Judge, run_dir: Path) -> str:
    """The judge's log: in the run's folder, or where a pooled judge had it before."""
    moved = run_dir / "judge.log"
    if moved.exists() or not isinstance(judge, service.LeasedJudge):
        return _tail(moved)
    return _tail(judge.log)


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-LOG_TAIL_BYTES:]
    except OSError:
        return ""
    return data.decode(errors="replace")
