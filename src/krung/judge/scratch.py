"""The worker's scratch folder (its HOME, TMPDIR and working directory, with the compile
caches of versions that load nothing of their own), and the sweep of those a dead judge left.

A judge removes its worker's scratch when it ends the worker, but a judge killed outright
(SIGKILL: an agent's tool past its time, the OOM killer) removes nothing: `make test` left a
dozen a run in the temp folder. So the judge holds an flock on a file in the scratch while it
lives; the kernel drops the lock when the judge dies, however it dies, and a scratch whose
lock can be taken is nobody's: the next judge to start a worker removes it (`sweep`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "krung-worker-"
OWNER = ".krung-owner"  # locked while the judge that made the folder lives

_swept = False


def make(parent: Path | None = None) -> tuple[Path, int | None]:
    """A new scratch folder, and the descriptor of its lock (held until `remove`)."""
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    owner = os.open(folder / OWNER, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a file system without locks: no owner file, so no sweep takes it
        os.unlink(folder / OWNER)
        os.close(owner)
        return folder, None
    return folder, owner


def remove(folder: Path, owner: int | None) -> None:
    """The folder gone, then its lock let go."""
    shutil.rmtree(folder, ignore_errors=True)
    if owner is not None:
        with contextlib.suppress(OSError):
            os.close(owner)


def sweep(parent: Path | None = None) -> list[Path]:
    """Remove the scratch folders in `parent` (the temp folder) whose judge is gone: those
    with an owner file nobody holds locked. A folder without one (another program's, or
    `krung-worker-cache-<uid>`, which is no scratch) is left alone. What it removed."""
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            owner = os.open(folder / OWNER, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # not a scratch, not this user's, or gone meanwhile
            continue
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its judge lives
            os.close(owner)
            continue
        if not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        os.close(owner)
    return removed


def sweep_once() -> None:
    """`sweep`, the first time this process starts a worker (a stale folder can hold a
    version's compile caches: worth the moment it takes, once)."""
    global _swept
    if not _swept:
        _swept = True
        sweep()
