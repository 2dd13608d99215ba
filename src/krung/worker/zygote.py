"""Workers forked rather than started: the judge's first children, made before the judge
imports any module of its own.

Starting a worker costs an interpreter and `import torch`, as much CPU as the judge's own
start: on a CPU an evaluation is mostly those two imports. So the judge's entry (`python -m
krung.judge`) imports torch and the worker's modules first, then forks. The child, the
zygote, holds nothing of the judge: no judge or host module is loaded and no request, seed or
input exists yet. It waits for how to start (the worker's arguments, environment, folder and
log, sent by Candidate.start) and becomes the worker, as `python -m krung.worker.serve` would
be after its imports. It is used once; a judge that ends without asking closes the pipe and
the zygote exits with it. A second zygote becomes the artifacts rung's build process
(krung.judge.rungs.artifacts.build), which imports the version too: `ROLES`.

Which workers are forked: KRUNG_FORK_WORKER (CPU workers only until the GPU gate has run it).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

from krung.protocol.channel import Channel, spawn

# What every worker imports before a version: loaded once, in the judge, before the fork.
PRELOAD = ("torch", "numpy", "krung.worker.serve", "krung.worker.guard", "krung.worker.timing",
           "krung.worker.launches", "krung.worker.library_calls")
# The processes a zygote may become, by role: the module whose main(argv) it runs.
ROLES = {"worker": "krung.worker.serve", "build": "krung.judge.rungs.artifacts.build"}
_spare: dict[str, Zygote] = {}  # this process's zygotes not yet used, by role


class Forked:
    """The zygote as the judge sees it: the worker's process, with the part of
    subprocess.Popen's interface the judge uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, how is not known
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass
class Zygote:
    """The judge's side of a zygote: its pid, the pipe that says how to start, and the
    judge's end of the worker's channel."""

    pid: int
    start_fd: int
    channel_fd: int
    role: str = "worker"

    def start(self, args: list[str], *, log: Path, env: dict[str, str],
              cwd: Path) -> tuple[Forked, Channel] | None:
        """Make the zygote the process `python -m MODULE ARGS` of its role would be; None
        when it is gone (killed meanwhile): then the caller starts the process."""
        spec = json.dumps({"args": args, "log": str(log), "env": env, "cwd": str(cwd),
                           "role": self.role})
        try:
            with open(self.start_fd, "w", closefd=True) as pipe:
                pipe.write(spec)
        except OSError:  # its end of the pipe is closed: it died
            with contextlib.suppress(OSError):
                os.close(self.channel_fd)
            Forked(self.pid).poll()  # reaped
            return None
        return Forked(self.pid), Channel(Connection(self.channel_fd))

    def close(self) -> None:
        """Not needed after all: the zygote exits."""
        for fd in (self.start_fd, self.channel_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def wanted(mode: str, device: str) -> bool:
    """Whether a worker on `device` is forked under KRUNG_FORK_WORKER=`mode`."""
    cpu = device == "cpu" or (device == "auto" and not os.path.exists("/dev/nvidiactl"))
    return mode == "on" or (mode == "cpu" and cpu)


def start(zygote: Zygote | None, args: list[str], *, log: Path, env: dict[str, str], cwd: Path,
          module: str, prefix: list[str] | None = None) -> tuple[Forked | Any, Channel]:
    """The process `python -m MODULE ARGS` (its own session, stdio to `log`): `zygote` made
    it, or, with none, a tool to run under (`prefix`), or a zygote gone, a new interpreter."""
    forked = zygote.start(args, log=log, env=env, cwd=cwd) \
        if zygote is not None and not prefix else None
    if forked is not None:
        return forked
    if zygote is not None:
        zygote.close()
    return spawn(module, args, log=log, env=env, new_session=True, prefix=prefix, cwd=cwd)


def keep(zygote: Zygote) -> None:
    """Keep `zygote` for whoever in this process starts a process of its role (`take`)."""
    _spare[zygote.role] = zygote


def take(role: str) -> Zygote | None:
    """The spare zygote of `role` (once), or None: then the process is started."""
    return _spare.pop(role, None)


def fork(role: str = "worker", preload: tuple[str, ...] = PRELOAD) -> Zygote:
    """Import `preload`, then fork a zygote of `role`. Call it while this process has no
    other thread of its own, no CUDA context and nothing the version must not see."""
    for name in preload:
        importlib.import_module(name)
    ours, theirs = socket.socketpair()
    start_read, start_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = fork_process()
    if pid == 0:
        def become() -> int:
            os.close(start_write)
            ours.close()
            return _become_worker(start_read, theirs.detach())

        exit_with(become)
    os.close(start_read)
    theirs.close()
    return Zygote(pid, start_write, ours.detach(), role)


def fork_process() -> int:
    """os.fork(), made where the process has imported what its children share."""
    # The objects made so far out of the collector's reach: its passes would write to every
    # page they are on, copying pages parent and child share (copy-on-write).
    gc.freeze()
    # Python 3.12 warns of any other thread at a fork: numpy's OpenBLAS pool, which OpenBLAS
    # itself stops around a fork (pthread_atfork); the child has this thread only.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def exit_with(body: Callable[[], int]) -> NoReturn:
    """In a forked child: run `body` and exit with its status (SystemExit's, such as
    argparse's; 1 if it raised), its output flushed. The child never returns into the code
    of the parent it is a copy of."""
    code = 1
    try:
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _become_worker(start_fd: int, channel_fd: int) -> int:
    close_all_but(start_fd, channel_fd)
    with open(start_fd, "rb") as pipe:
        text = pipe.read()
    if not text:  # the judge ended without a worker
        return 0
    spec: dict[str, Any] = json.loads(text)
    take_over(spec["log"], spec["cwd"], spec["env"])
    # The judge's package (empty, imported to reach its entry) is no worker module.
    if spec["role"] == "worker":
        for name in [m for m in sys.modules if m == "krung.judge" or m.startswith("krung.judge.")]:
            del sys.modules[name]
    module = importlib.import_module(ROLES[spec["role"]])
    sys.argv = [module.__file__, "--fd", str(channel_fd), *spec["args"]]  # as if started
    module.main(sys.argv[1:])
    return 0


def take_over(log: str, cwd: str, env: dict[str, str]) -> None:
    """Make this forked process what `subprocess` would have started: a session of its own
    (start_new_session), stdin from /dev/null, stdout and stderr to `log`, in `cwd` with
    `env`."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    # Unbuffered, as PYTHONUNBUFFERED makes a started process's: a killed process's last
    # words are in its log.
    for name in ("stdout", "stderr"):
        stream = io.TextIOWrapper(io.FileIO(1 if name == "stdout" else 2, "w", closefd=False),
                                  encoding="utf-8", errors="backslashreplace",
                                  write_through=True)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the parent's was found before HOME and TMPDIR changed


def close_all_but(*kept: int) -> None:
    """Close every descriptor the judge had but stdin, stdout, stderr and `kept`: the
    judge's channel to its caller above all, whose end must close when the judge dies."""
    low = 3
    for fd in sorted(kept):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
