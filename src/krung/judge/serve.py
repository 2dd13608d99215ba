"""The judge: one process per evaluation that owns the truth.

Started as `python -m krung.judge --fd N --device D ...`, by `evaluate` (a cold start) or
ahead of any evaluation by the warm service (krung.host.service, `--pooled`). Either way its
worker starts first (forked from it on a CPU, krung.worker.zygote; elsewhere started, while
this process imports torch), then it reads the one request it serves. A pooled judge does more before that: CUDA and the profiler started, the
rungs' modules imported, its worker's hello received; then it says `ready`. It imports the
problem (never the version), makes the inputs, computes the expected outputs and compares;
the version runs in the worker, which the judge polices.

Results stream back as tagged messages (krung.protocol.messages.FROM_JUDGE): `ready` (pooled,
before the request), `env`, `progress`, `calibration`, `rung`, `problem_error`, `error`, `done`. While it serves the request, the judge
says something at least every HEARTBEAT_S (a progress message that repeats the last one with
the time since), so its caller sees a slow rung and tells a hung judge from a busy one fast.
SIGTERM, or a caller that is gone, ends the judge and its workers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import importlib.metadata
import os
import platform
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from krung.judge.candidate import (
    Candidate,
    WorkerStartFailed,
    hidden_store,
    kill_all,
    raises_walls,
)
from krung.judge.ladder import RUNGS, Context, climb, derive_seed, rung_module
from krung.judge.problem import Problem, load_problem
from krung.judge.problem.behaviour import check_behaviour
from krung.judge.problem.cpu_fit import check_fits
from krung.judge.problem.policy import Policy
from krung.judge.solution import read_copy
from krung.protocol import build_cache, messages
from krung.protocol.channel import Channel, ChannelClosed
from krung.protocol.errors import KrungError, ProblemError, RungFailed
from krung.protocol.results import RungResult
from krung.protocol.settings import Settings
from krung.worker.serve import host_peak_mib, move_to
from krung.worker.zygote import Zygote

HEARTBEAT_S = Settings.heartbeat_s  # KRUNG_HEARTBEAT; the caller's silence limit
# (krung.host.evaluate) is several of these
WORKER_START_S = 300.0  # a pooled judge's wait for its worker's hello


class Pulse:
    """The judge's side of the channel to its caller. Every message goes under one lock (the
    heartbeat thread sends too); once nothing was sent for `interval_s`, the heartbeat repeats
    the last progress message with the time since it (`case 2/4 ... (15 s)`). A send that
    finds the caller gone ends the judge."""

    def __init__(self, channel: Channel, interval_s: float = HEARTBEAT_S):
        self._channel = channel
        self._interval = interval_s
        self._lock = threading.Lock()
        self._last_sent = self._since = time.monotonic()
        self._rung, self._message = "setup", "loading the problem"
        self._stopped = threading.Event()
        threading.Thread(target=self._beat, name="krung-heartbeat", daemon=True).start()

    def send(self, message: messages.FromJudge) -> None:
        with self._lock:
            self._channel.send(message)
            self._last_sent = time.monotonic()
            if isinstance(message, messages.Progress):
                self._rung, self._message = message.rung, message.message
                self._since = self._last_sent

    def progress(self, rung: str, message: str) -> None:
        self.send(messages.Progress(rung=rung, message=message))

    def starting(self, rung: str) -> None:
        with self._lock:
            self._rung, self._message, self._since = rung, "running", time.monotonic()

    def stop(self) -> None:
        self._stopped.set()

    def _beat(self) -> None:
        while not self._stopped.wait(self._interval / 4):
            with self._lock:
                now = time.monotonic()
                if now - self._last_sent < self._interval or self._stopped.is_set():
                    continue
                try:
                    self._channel.send(messages.Progress(
                        rung=self._rung, message=f"{self._message} ({now - self._since:.0f} s)",
                        heartbeat=True))
                except ChannelClosed:
                    abort()
                self._last_sent = now


def abort(*_: Any) -> None:
    """End now, with the workers and whatever else the judge started (nvcc, ncu): SIGTERM
    from the caller (Ctrl-C there), or a caller that is gone. Started by `evaluate` or the
    service in a session of its own, the judge's process group is its own."""
    kill_all()
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)


class Laps:
    """The seconds of each step the judge takes before the first rung, as the run's
    `before_rungs_s`: where a run's time outside its rungs goes (at declared sizes, the
    reference's weights and the behaviour check's inputs take seconds)."""

    def __init__(self) -> None:
        self.at = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def done(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step] = round(now - self.at, 3)
        self.at = now


def judge(pulse: Pulse, request: messages.Request, candidate: Candidate, device: str,
          logs: tuple[Path, Path]) -> None:
    laps = Laps()
    settings = Settings(**request.settings)
    run_dir = Path(request.run_dir)
    from krung.judge.rungs.artifacts import FOLDER as ARTIFACTS
    from krung.judge.rungs.artifacts.dumped import dump_dir, dump_env

    if request.cwd:  # a pooled judge started elsewhere: work where the caller does
        move_to(request.cwd)
    _move_logs(logs, run_dir, candidate)
    solution = read_copy(request.version, request.solution, request.sha256)
    candidate.solution = solution.path
    # The DSLs that can keep the kernels they compile (CuTeDSL) keep them in the run's folder
    # (told to a version of theirs alone: the run's folder names the store's); the version's
    # process may write there and in the artifacts rung's folder, in no other of the run's.
    if solution.dsl == "cutedsl":
        candidate.at_load = {"env": dump_env(run_dir)}
    candidate.writable = [dump_dir(run_dir, "cutedsl"), run_dir / ARTIFACTS]
    candidate.walls = raises_walls(settings.sandbox, device)
    candidate.hidden, candidate.keep = hidden_store(
        settings.store, run_dir, [Path(request.problem), solution.path.parent])
    if "artifacts" in request.rungs:  # a folder must be there for the sandbox to allow it
        (run_dir / ARTIFACTS).mkdir(exist_ok=True)
    pulse.send(messages.Env({"worker_pid": candidate.pid, "judge_pid": os.getpid()}))
    laps.done("version_read")  # with its sandbox and the run's folders
    try:
        if device == "cuda":
            candidate.use_cuda_ipc()
            # Paid here, on the main thread (CUPTI's one owner: timing.profiler_session),
            # rather than inside the first rung that traces the reference's kernels.
            from krung.worker.timing import start_profiler

            start_profiler()
        if device == "cpu":  # a GPU's sizes on a CPU: refused before they fill its memory
            check_fits(Path(request.problem), settings.scale,
                       build_cache.root_for(run_dir) / "footprint")
        laps.done("device")
        problem = load_problem(Path(request.problem), request.precision, settings.scale,
                               Policy.of(settings), settings.inputs_on_device)
        settings = _capped(settings, problem)
        laps.done("problem_load")
        if problem.setup is not None:  # e.g. KernelBench: the reference model's weights
            problem.setup(derive_seed(request.seed, "setup"), device)
        laps.done("problem_setup")
        check_behaviour(problem, device)
        laps.done("behaviour_check")
        env = {**environment(device), "problem_format": problem.format, **problem.facts,
               "before_rungs_s": laps.seconds}
        ctx = Context(problem=problem, solution=solution, device=device, candidate=candidate,
                      settings=settings, seed=request.seed, run_dir=run_dir, env=env,
                      progress=pulse.progress, calibrations=list(request.calibrations),
                      save_calibration=lambda entry: pulse.send(messages.Calibration(entry)))
        pulse.send(messages.Env(env))

        def emit(result: RungResult) -> None:
            pulse.send(messages.RungDone(result.to_json()))

        climb(ctx, list(request.rungs), emit, starting=pulse.starting)
        pulse.send(messages.Env({**environment(device), **_worker_facts(candidate)}))
    finally:
        candidate.close()
    pulse.send(messages.Done())


def _move_logs(logs: tuple[Path, Path], run_dir: Path, candidate: Candidate) -> None:
    """A pooled judge's log and its worker's start in the service's folder: into the run's."""
    own, _ = logs
    if own != run_dir / "judge.log":
        with contextlib.suppress(OSError):
            os.replace(own, run_dir / "judge.log")
    candidate.move_log(run_dir / "worker.log")


def _capped(settings: Settings, problem: Problem) -> Settings:
    """The problem's own time limits (GPU MODE's task.yml) cap krung's, never raise them."""
    lower = {k: min(getattr(settings, k), v) for k, v in problem.timeouts.items()}
    return settings.replace(**lower) if lower else settings


def resolve_device(requested: str) -> str:
    import torch

    # cuDNN's convolutions in float32, as in the version's worker (krung.worker.serve's
    # resolve_device says why), before any problem's code runs
    torch.backends.cudnn.allow_tf32 = False
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise KrungError("--device cuda was asked for, but torch sees no CUDA device",
                         hint="run on a machine with an NVIDIA GPU and a CUDA build of torch, "
                              "or use --device cpu (Triton's interpreter)")
    return requested


def hold_scratch() -> None:
    """On the GPU, what the judge keeps for its life, allocated before any problem's data:
    cuBLAS's workspaces (its first matmul and dot; torch keeps them, and empty_cache does not
    give them back) and the L2 flush buffer. Made later, each would land in a block a freed
    input left in torch's cache and hold that input's whole segment: a likely cause, not
    measured, of a judge that held three copies of a 16 GiB input with two live
    (`judge_device_pinned_mib` tells). Where the GPU has no room even for these, they are
    made when first needed, as before, and the rungs say what is wrong."""
    import torch

    from krung.worker.timing import allocate_flush

    with contextlib.suppress(RuntimeError):  # torch.OutOfMemoryError is one
        allocate_flush()
        small = torch.ones(8, 8, device="cuda")
        torch.mm(small, small)
        torch.dot(small[0], small[0])
        torch.cuda.synchronize()


def environment(device: str) -> dict[str, Any]:
    """Everything that could change a figure: device, driver, library versions."""
    import numpy
    import torch

    from krung import __version__

    env: dict[str, Any] = {
        "device": device, "krung": __version__, "python": platform.python_version(),
        "torch": torch.__version__, "numpy": numpy.__version__, "cuda": torch.version.cuda,
        "host": platform.node(), "platform": platform.platform(),
    }
    # From the package's metadata, not the module: importing triton here only to read its
    # version costs seconds, and a module still being imported has no __version__ yet.
    # (PyTorch's own builds of Triton come as pytorch-triton.)
    for distribution in ("triton", "pytorch-triton", "pytorch-triton-rocm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            env["triton"] = importlib.metadata.version(distribution)
            break
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(device_name=props.name, sm=f"{props.major}.{props.minor}",
                   sms=props.multi_processor_count, l2_bytes=props.L2_cache_size,
                   memory_bytes=props.total_memory, driver=_driver_version(),
                   device_uuid=f"GPU-{props.uuid}" if getattr(props, "uuid", None) else None,
                   visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    else:
        env["device_name"] = "cpu"
    return env


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # nvidia-ml-py missing or NVML unavailable: the figure is optional
        return None


def _worker_facts(candidate: Candidate) -> dict[str, Any]:
    facts = candidate.facts
    # the sandbox the version ran in (krung.worker.guard.restrict), as its worker said
    sandbox = {"sandbox": candidate.sandbox} if candidate.sandbox else {}
    memory = {"judge_host_peak_mib": host_peak_mib()}  # what each process held at its peak
    if "host_peak_mib" in facts:
        memory["worker_host_peak_mib"] = facts["host_peak_mib"]
    if "device_peak_mib" in facts:  # torch's reservations on the GPU
        import torch

        memory.update(worker_device_peak_mib=facts["device_peak_mib"],
                      judge_device_peak_mib=round(torch.cuda.max_memory_reserved() / 2**20, 1))
        with contextlib.suppress(RuntimeError):  # a broken context: the figure, not the run
            torch.cuda.empty_cache()  # what is left reserved and free: held by a live block
            pinned = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            memory["judge_device_pinned_mib"] = round(pinned / 2**20, 1)
    return {**{k: facts[k] for k in ("triton",) if facts.get(k)}, **sandbox, **memory}


def _warm(device: str, candidate: Candidate) -> None:
    """What a pooled judge does before its evaluation comes, so the evaluation need not:
    import the rungs, start CUDA and the profiler, wait for the worker's hello."""
    for name in RUNGS:
        rung_module(name)
    if device == "cuda":
        import torch

        from krung.worker.timing import start_profiler

        torch.cuda.init()
        start_profiler()
    with contextlib.suppress(RungFailed, WorkerStartFailed):  # told again by compile's hello
        candidate.hello(WORKER_START_S)


def main(argv: list[str] | None = None, zygote: Zygote | None = None) -> None:
    """The judge; `zygote`: its worker, forked already (krung.judge.__main__)."""
    parser = argparse.ArgumentParser(prog="python -m krung.judge")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", default="auto", help="the device its worker runs on")
    parser.add_argument("--cuda-ipc", action="store_true")
    parser.add_argument("--max-file-bytes", type=int, default=1 << 30)
    parser.add_argument("--log", type=Path, required=True, help="where this process writes")
    parser.add_argument("--worker-log", type=Path, required=True)
    parser.add_argument("--pooled", action="store_true",
                        help="warm up fully and say `ready` before reading the request")
    args = parser.parse_args(argv)
    faulthandler.enable()
    signal.signal(signal.SIGTERM, abort)
    channel = Channel.from_fd(args.fd)
    # The worker starts first (forked, or started while this process imports torch).
    candidate = Candidate(args.device, args.worker_log.parent, Path(), args.cuda_ipc,
                          args.max_file_bytes, log_name=args.worker_log.name)
    candidate.start(preload=("triton",) if args.pooled else (), zygote=zygote)
    failed: BaseException | None = None
    device = args.device
    try:
        device = resolve_device(args.device)
        if device == "cuda":
            hold_scratch()
        if args.pooled:
            _warm(device, candidate)
    except Exception as exc:  # told to the caller once it asks
        failed = exc
    try:
        if args.pooled:
            channel.send(messages.Ready())
        request = channel.recv(expect=messages.TO_JUDGE)
    except ChannelClosed:  # nobody will ask: the service stopped before handing us out
        abort()
    except messages.ProtocolError as exc:  # told to the caller, as a failure to start is
        failed = failed or exc
    pulse = Pulse(channel, HEARTBEAT_S if failed is not None
                  else float(request.settings.get("heartbeat_s", HEARTBEAT_S)))
    try:
        if failed is not None:
            raise failed
        judge(pulse, request, candidate, device, (args.log, args.worker_log))
    except ChannelClosed:
        abort()
    except ProblemError as exc:
        pulse.send(messages.ProblemFailed(exc.message, [list(d) for d in exc.defects],
                                          hint=exc.hint))
    except KrungError as exc:
        pulse.send(messages.JudgeFailed(exc.message, hint=exc.hint, usage=True))
    except RungFailed as exc:  # the worker failed before any rung began
        pulse.send(messages.JudgeFailed(str(exc), hint=exc.hint, details=exc.details))
    except Exception as exc:
        pulse.send(messages.JudgeFailed(f"{type(exc).__name__}: {exc}",
                                        details=traceback.format_exc()))
    finally:
        pulse.stop()
        candidate.close()
    # Everything is sent and the worker is gone: skip the interpreter's (and torch's) slow
    # tear-down, which would only make the caller wait.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
