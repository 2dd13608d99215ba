"""krung's local servers over Unix sockets (the warm service, krung.host.service, and the
judge fork server, krung.judge.forks): one JSON message per line, a file descriptor riding on
a message's first bytes where one is handed over, and the stamp of krung's code that says a
server imports the same code as its caller."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from krung.protocol import messages

# Variables of the caller's environment that change nothing for a judge.
VOLATILE = ("PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "PYTEST_CURRENT_TEST")


def code_stamp() -> str:
    """krung's source as it is now (its folder, file count and newest change): a server
    whose processes import older code than the caller's must not serve it."""
    root = Path(__file__).resolve().parent.parent
    count, newest = 0, 0
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                count += 1
                newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
    return f"{root}:{count}:{newest}:{sys.executable}"


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a server's owner)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def address(path: Path) -> Iterator[str]:
    """A name for the socket at `path` short enough for AF_UNIX (108 bytes): the path, or
    through /proc/self/fd when a deep store folder makes it longer."""
    if len(os.fsencode(path)) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def send(sock: socket.socket, message: messages.Message, fd: int | None = None) -> None:
    """Send one message as a JSON line; with `fd`, that file descriptor rides on its first
    bytes. Once those are sent the fd is the peer's, whatever becomes of the rest (an error
    then is `Delivered`)."""
    data = json.dumps(messages.encode(message)).encode() + b"\n"
    if fd is None:
        sock.sendall(data)
        return
    sent = socket.send_fds(sock, [data], [fd])
    if sent < len(data):
        try:
            sock.sendall(data[sent:])
        except OSError as exc:
            raise Delivered(str(exc)) from exc


class Delivered(Exception):
    """The file descriptor went out, the rest of its message did not."""


def receive(sock: socket.socket, want_fd: bool = False) -> tuple[Any, list[int]]:
    """One JSON line, as it was sent, and the file descriptors that came with its first
    bytes."""
    chunks: list[bytes] = []
    fds: list[int] = []
    while not chunks or not chunks[-1].endswith(b"\n"):
        if want_fd and not chunks:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 1)
        else:
            data = sock.recv(1 << 16)
        if not data:
            for fd in fds:
                os.close(fd)
            raise ConnectionResetError("the server closed the connection mid-message")
        chunks.append(data)
        if sum(map(len, chunks)) > 1 << 22:
            raise ConnectionResetError("the message is too large")
    return json.loads(b"".join(chunks)), fds
