"""One GPU, one measurement at a time: a lock per GPU for the rungs that time or profile.

The rungs that declare `exclusive_gpu` (krung.judge.rungs.spec: the benchmark, profile,
roofline for its calibration, and trace) take the GPU for themselves, whoever else wants it:
another evaluation of the same service, another client, a plain `krung run` in a second
terminal. The lock is an flock on a file named by the GPU's
UUID in the machine's temporary folder, so every process of every user on this machine sees
the same one, and the kernel releases it when its holder dies, however it dies. The other
rungs (start, compile, correctness) run beside a measurement: that is how a suite on one GPU
overlaps the next versions' work with the current benchmark.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

NAME = "krung-gpu-{}.lock"  # in the machine's temporary folder, {} the GPU's UUID


def lock_path(env: dict[str, Any]) -> Path:
    """The lock file of the GPU that `env` (judge.serve.environment) describes; one for the
    whole machine when the GPU has no UUID to tell it apart."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(env.get("device_uuid") or "unknown"))
    return Path(tempfile.gettempdir()) / NAME.format(name)


@contextlib.contextmanager
def exclusive(path: Path, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Hold the lock at `path` inside the block; `waiting` is called once if another process
    holds it (and the block then waits for it)."""
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _open(path: Path) -> int:
    """Open the lock file read-only (flock needs no more), creating it if it is missing. An
    O_CREAT open of another user's file in a sticky folder such as /tmp is refused
    (fs.protected_regular), so the file is created only when it is not there."""
    while True:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        try:
            return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:  # created between the two opens: open it again
            continue
