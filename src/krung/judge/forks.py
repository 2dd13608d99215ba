"""The judge fork server: CPU judges forked from a process that imported torch once.

A cold judge costs an interpreter and `import torch`, about 1.5 s of CPU: on a CPU, most of a
small evaluation. `python -m krung.judge.forks --socket PATH` imports what a judge imports
before its zygotes (krung.worker.zygote.PRELOAD), then, for each evaluation that asks over
PATH (KRUNG_JUDGE_FORKS), forks a judge that is what `python -m krung.judge ARGS` would be
after those imports: a session of its own, the caller's environment, folder and log, and the
channel the caller made. The server holds no request, problem or version; each judge serves
one evaluation, as a cold one does.

It forks only judges a cold start would make the same: on the CPU (a GPU judge's start is
what the GPU gate has run), with krung's code and Python as the server imported them, and an
environment that is the server's but for krung's own settings (read when used, not at import)
and what changes nothing (unix.VOLATILE). Otherwise the evaluation starts its judge cold. The
server is the judges' parent: it sends each judge's exit status to the connection that asked
for it. It exits with its owner (--owner).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

from krung.protocol import messages, unix
from krung.protocol.channel import Channel
from krung.worker import zygote

REPLY_S = 30.0  # a loaded machine may be slow to answer, never this slow
REAP_S = 60.0  # a judge whose channel closed exits at once; its status, not worth more


# The client side: what `evaluate` uses.


class ForkedJudge:
    """A judge the server forked for this evaluation: its channel is ours; the process is
    the server's child, whose exit status comes on the connection that asked for it."""

    origin = "forked"

    def __init__(self, pid: int, channel: Channel, server: socket.socket):
        self.pid = pid
        self.channel = channel
        self._server: socket.socket | None = server
        self._status: int | None = None

    def exit_status(self, timeout: float) -> int | None:
        if self._server is None:
            return self._status
        self._server.settimeout(timeout)
        try:
            data, _ = unix.receive(self._server)
            self._status = messages.Replies("the judge's exit", messages.Exited,
                                            messages.Refused).decode(data).status
        except TimeoutError:
            return None
        except (OSError, ValueError):  # the server is gone: the status is not known
            pass
        self._server.close()
        self._server = None
        return self._status

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # the judge leads its own session

    def reap(self) -> None:
        self.exit_status(REAP_S)
        if self._server is not None:
            self._server.close()


def fork_judge(path: str, device: str, args: list[str], env: dict[str, str],
               log: Path) -> ForkedJudge | None:
    """A judge forked by the server at `path` (`python -m krung.judge ARGS` on `device`), or
    None where there is none, or it cannot fork this one: then the caller starts it."""
    if not path or not zygote.wanted("cpu", device):
        return None
    ours, theirs = socket.socketpair()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.settimeout(REPLY_S)
    request = messages.ForkJudge(device=device, args=args, env=env, cwd=os.getcwd(),
                                 log=str(log), stamp=unix.code_stamp())
    reply = None
    try:
        with unix.address(Path(path)) as address:
            server.connect(address)
        unix.send(server, request, fd=theirs.fileno())
        data, _ = unix.receive(server)
        reply = messages.replies(request).decode(data)
    except (OSError, ValueError, unix.Delivered):  # no server, or another krung's
        pass
    finally:
        theirs.close()
    if not isinstance(reply, messages.Handed):
        ours.close()
        server.close()
        return None
    return ForkedJudge(reply.pid, Channel(Connection(ours.detach())), server)


def start(path: Path, owner: int, wait_s: float = 120.0) -> subprocess.Popen:
    """Start a server listening at `path` for as long as process `owner` lives, its output
    beside it (.log); returns once it listens. Raises RuntimeError when it does not come up."""
    with open(path.with_suffix(".log"), "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "krung.judge.forks", "--socket",
                                    str(path), "--owner", str(owner)],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=path.parent,  # a judge's environment (JudgeSpec.of)
                                   env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + wait_s
    while not path.exists():  # bound once torch is imported
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the judge fork server at {path} did not start")
        time.sleep(0.05)
    return process


# The server.


class Server:
    def __init__(self, path: Path, owner: int | None):
        for name in zygote.PRELOAD:
            importlib.import_module(name)
        self.stamp = unix.code_stamp()
        self.env = dict(os.environ)
        self.owner = owner
        self.asked: dict[int, socket.socket] = {}  # judge pid -> the connection that asked
        # SIGCHLD wakes the loop up, so a judge's exit status leaves at once.
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous = os.umask(0o077)  # its owner's alone: it runs code as them
        try:
            with unix.address(path) as address:
                self.listener.bind(address)
        finally:
            os.umask(previous)
        self.listener.listen(64)

    def run(self) -> None:
        while self.owner is None or unix.alive(self.owner):
            ready, _, _ = select.select([self.listener, self.wake_r], [], [], 1.0)
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 4096)
            if self.listener in ready:
                conn, _ = self.listener.accept()
                conn.settimeout(REPLY_S)
                try:
                    self._answer(conn)
                except (OSError, ValueError) as exc:
                    print(f"a request failed: {exc}", flush=True)
                    conn.close()
            self._reap()

    def _answer(self, conn: socket.socket) -> None:
        data, fds = unix.receive(conn, want_fd=True)
        try:
            request = messages.TO_FORKS.decode(data)
            why = self._refusal(request, fds)
        except messages.ProtocolError as exc:
            why = str(exc)
        if why is not None:
            print(f"not forked (started cold): {why}", flush=True)
            for fd in fds:
                os.close(fd)
            unix.send(conn, messages.Refused(why))
            conn.close()
            return
        pid = zygote.fork_process()
        if pid == 0:
            zygote.exit_with(lambda: _become_judge(request, fds[0]))
        os.close(fds[0])
        self.asked[pid] = conn
        unix.send(conn, messages.Handed(pid, request.log, True))

    def _refusal(self, request: messages.ForkJudge, fds: list[int]) -> str | None:
        if len(fds) != 1:
            return "no channel came with the request"
        if not zygote.wanted("cpu", request.device):
            return "judges on a GPU start cold"
        if request.stamp != self.stamp:
            return "krung's code or Python differs from the server's"
        ours, theirs = (({k: v for k, v in env.items()
                          if not k.startswith("KRUNG_") and k not in unix.VOLATILE})
                        for env in (self.env, request.env))
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        if differ:  # read at import, by torch or Python: a cold judge would see them
            return f"the environment differs from the server's: {', '.join(differ)}"
        return None

    def _reap(self) -> None:
        while self.asked:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            conn = self.asked.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    unix.send(conn, messages.Exited(os.waitstatus_to_exitcode(status)))
                conn.close()


def _become_judge(request: messages.ForkJudge, channel_fd: int) -> int:
    """In the forked child: become `python -m krung.judge ARGS`."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    zygote.close_all_but(channel_fd)  # the server's socket and its other callers'
    zygote.take_over(request.log, request.cwd, request.env)
    sys.path[0] = request.cwd  # as `python -m` puts the folder it starts in
    if "numpy.random" in sys.modules:  # seeded at import: the server's, not this one's
        sys.modules["numpy.random"].seed()
    from krung.judge import __main__ as judge

    sys.argv = [judge.__file__, "--fd", str(channel_fd), *request.args]  # as if started
    judge.main()
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m krung.judge.forks")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--owner", type=int, help="exit when this process has ended")
    args = parser.parse_args(argv)
    server = Server(args.socket, args.owner)
    try:
        server.run()
    finally:
        with contextlib.suppress(FileNotFoundError):
            args.socket.unlink()


if __name__ == "__main__":
    main()
