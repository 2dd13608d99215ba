"""The judge: one process per evaluation that owns the truth.

Started by `evaluate` as `python -m krung.judge.serve --fd N`. It imports the problem (never the
version), makes the inputs, computes the expected outputs and compares; the version runs in
a candidate worker that the judge starts and polices. Results stream back to the parent as
tagged JSON messages: `env`, `progress`, `rung`, `problem_error`, `error`, `done`.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import platform
import sys
import traceback
from pathlib import Path
from typing import Any

from krung.judge.candidate import Candidate
from krung.judge.ladder import Context, climb, derive_seed
from krung.judge.problem import Problem, load_problem
from krung.judge.problem.behaviour import check_behaviour
from krung.judge.solution import read_solution
from krung.protocol.channel import Channel
from krung.protocol.errors import KrungError, ProblemError, RungFailed
from krung.protocol.results import RungResult
from krung.protocol.settings import Settings


def judge(channel: Channel, request: dict[str, Any]) -> None:
    settings = Settings(**request["settings"])
    run_dir = Path(request["run_dir"])
    solution = read_solution(request["solution"])
    from krung.judge.rungs.artifacts.dumped import dump_env

    # The DSLs that can keep the kernels they compile (CuTeDSL) keep them in the run's folder.
    candidate = Candidate(request["device"], run_dir, solution.path, settings.cuda_ipc,
                          settings.max_file_bytes, env=dump_env(run_dir))
    candidate.start()  # its start-up overlaps ours
    channel.send({"type": "env", "env": {"worker_pid": candidate.pid}})
    try:
        device = resolve_device(request["device"])
        if device == "cuda":
            candidate.use_cuda_ipc()
            if {"benchmark", "roofline"} & set(request["rungs"]):  # the reference is timed too
                from krung.worker.timing import warm_profiler

                warm_profiler()
        problem = load_problem(Path(request["problem"]), request.get("precision"), settings.scale)
        settings = _capped(settings, problem)
        if problem.setup is not None:  # e.g. KernelBench: the reference model's weights
            problem.setup(derive_seed(int(request["seed"]), "setup"), device)
        check_behaviour(problem, device)
        env = {**environment(device), "problem_format": problem.format, **problem.facts}
        ctx = Context(problem=problem, solution=solution, device=device, candidate=candidate,
                      settings=settings, seed=int(request["seed"]), run_dir=run_dir, env=env,
                      progress=lambda rung, message: channel.send(
                          {"type": "progress", "rung": rung, "message": message}),
                      calibrations=list(request.get("calibrations") or []),
                      save_calibration=lambda entry: channel.send(
                          {"type": "calibration", "entry": entry}))
        channel.send({"type": "env", "env": env})

        def emit(result: RungResult) -> None:
            channel.send({"type": "rung", "result": result.to_json()})

        climb(ctx, list(request["rungs"]), emit)
        channel.send({"type": "env", "env": {**environment(device), **_worker_facts(candidate)}})
    finally:
        candidate.close()
    channel.send({"type": "done"})


def _capped(settings: Settings, problem: Problem) -> Settings:
    """The problem's own time limits (GPU MODE's task.yml) cap krung's, never raise them."""
    lower = {k: min(getattr(settings, k), v) for k, v in problem.timeouts.items()}
    return settings.replace(**lower) if lower else settings


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise KrungError("--device cuda was asked for, but torch sees no CUDA device",
                         hint="run on a machine with an NVIDIA GPU and a CUDA build of torch, "
                              "or use --device cpu (Triton's interpreter)")
    return requested


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
    triton = sys.modules.get("triton")
    if triton is not None:
        env["triton"] = triton.__version__
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
    return {k: facts[k] for k in ("triton",) if facts.get(k)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m krung.judge.serve")
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    faulthandler.enable()
    channel = Channel.from_fd(args.fd)
    request = channel.recv()
    try:
        judge(channel, request)
    except ProblemError as exc:
        channel.send({"type": "problem_error", "message": exc.message, "hint": exc.hint,
                      "defects": exc.defects})
    except KrungError as exc:
        channel.send({"type": "error", "message": exc.message, "hint": exc.hint, "usage": True})
    except RungFailed as exc:  # the worker failed before any rung began
        channel.send({"type": "error", "message": str(exc), "hint": exc.hint,
                      "details": exc.details})
    except Exception as exc:
        channel.send({"type": "error", "message": f"{type(exc).__name__}: {exc}",
                      "details": traceback.format_exc()})
    # Everything is sent and the worker is gone: skip the interpreter's (and torch's) slow
    # tear-down, which would only make the caller wait.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
