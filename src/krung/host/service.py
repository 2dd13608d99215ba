"""The warm evaluation service: judges started before they are needed, one service per store.

`krung service start` (or KRUNG_SERVICE=on; `krung mcp`, `watch`, `batch` and `suite` start one
for their own lifetime) runs `python -m krung.host.service` beside the store. It listens on a
Unix socket there (`service.sock`, for its owner only), holds an flock on `service.lock` for
its whole life (so two never serve one store, and a socket whose service was killed is known
to be stale) and keeps a pool of pre-started judges (`krung.judge.serve --pooled`) for each
kind of evaluation it was asked for: the device, the worker's limits and the caller's
environment (a judge's environment is fixed when it starts, so it must be the caller's).
A pooled judge has imported torch, started CUDA and the profiler and its own worker, which
has imported torch and Triton and nothing of any version. Each judge serves one evaluation
and exits, so every version still gets a fresh worker that never ran another, and no judge
imports a version: the trust rules of a cold evaluation hold unchanged.

An evaluation asks for a judge (`acquire`) and gets the judge's channel itself, passed over
the socket (SCM_RIGHTS): from then on it talks to the judge as to one it started, and a
service that dies mid-run loses nothing. A pool holds `pool` judges of its kind, those at
work counted: a judge is replaced when its evaluation ends, not when it is handed out, so its
successor's start (seconds of CPU) does not slow the evaluation under way on a machine with
few cores, and warms up while the agent thinks; a batch asks for a pool of twice its slots,
so one judge per slot warms up while the slot works. The service exits when
no evaluation ran or was asked for during `idle_s`, when the process it serves (`--owner`) is gone, or
when krung's source changed since it started (a caller with newer code is told so, and
starts its judge cold).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from krung.protocol import messages, unix
from krung.protocol.channel import Channel, ChannelClosed, spawn
from krung.protocol.errors import KrungError, UsageError
from krung.protocol.settings import Settings

SOCKET = "service.sock"
LOCK = "service.lock"
FOLDER = "service"  # logs of the service and of the judges not yet handed out
IDLE_S = 900.0
POOL = 1  # judges kept ready per kind of evaluation
MAX_KINDS = 8  # kinds of evaluation with a pool (one per GPU of a batch, say)
START_FAILURES = 3  # judges of one kind that died before they were ready: stop trying
REPLY_S = 30.0  # a loaded machine may be slow to answer, never this slow


def handed_out(store: str | Path) -> list[tuple[int, str]]:
    """The judges the service of `store` handed out, as its log says, in order: each judge's
    pid and "ready" or "starting" (one still starting costs its run torch's import and, on a
    GPU, CUDA's start). Empty where there is no log."""
    try:
        log = (paths(store)[2] / "service.log").read_text(errors="replace")
    except OSError:
        return []
    return [(int(pid), state) for pid, state in
            re.findall(r"^judge (\d+) handed out \((ready|starting)\)$", log, re.MULTILINE)]


def paths(store: str | Path) -> tuple[Path, Path, Path]:
    """The socket, the lock file and the folder of the service of `store`."""
    folder = Path(store).resolve().parent
    return folder / SOCKET, folder / LOCK, folder / FOLDER


@dataclass(frozen=True)
class JudgeSpec:
    """How a judge is started: what it cannot change once it runs."""

    device: str
    cuda_ipc: bool
    max_file_bytes: int
    env: dict[str, str] = field(hash=False)

    @classmethod
    def of(cls, settings: Settings, env: dict[str, str]) -> JudgeSpec:
        """The judge for an evaluation with `settings`, in this process's environment plus
        `env`; search paths made absolute, since a pooled judge starts elsewhere."""
        full = dict(os.environ, PYTHONUNBUFFERED="1", **env)
        if full.get("PYTHONPATH"):
            full["PYTHONPATH"] = os.pathsep.join(
                os.path.abspath(p) if p else p for p in full["PYTHONPATH"].split(os.pathsep))
        return cls(settings.device, settings.cuda_ipc, settings.max_file_bytes, full)

    def args(self, log: Path, worker_log: Path, pooled: bool = False) -> list[str]:
        """The judge's command-line arguments (krung.judge.serve)."""
        return ["--device", self.device, "--max-file-bytes", str(self.max_file_bytes),
                "--log", str(log), "--worker-log", str(worker_log),
                *(["--cuda-ipc"] if self.cuda_ipc else []), *(["--pooled"] if pooled else [])]

    def key(self) -> str:
        kept = {k: v for k, v in self.env.items() if k not in unix.VOLATILE}
        text = json.dumps([self.device, self.cuda_ipc, self.max_file_bytes, sys.executable,
                           sorted(kept.items())])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> messages.JudgeSpecJson:
        return {"device": self.device, "cuda_ipc": self.cuda_ipc,
                "max_file_bytes": self.max_file_bytes, "env": self.env}


# The client side: what `evaluate` and the commands use.


@dataclass
class LeasedJudge:
    """A judge the service started and handed over: its channel is ours; the process is the
    service's child, so its exit status comes from there."""

    channel: Channel
    pid: int
    log: Path  # its log until the judge moves it into the run's folder
    store: Path
    origin = "service"

    def exit_status(self, timeout: float) -> int | None:
        with contextlib.suppress(OSError, KrungError):
            reply = _ask(self.store, messages.ExitOf(self.pid, timeout), timeout + REPLY_S)
            if isinstance(reply, messages.Exited):
                return reply.status
        return None

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # the judge leads its own process group

    def reap(self) -> None:
        """Nothing to wait for: the service reaps its children."""


def acquire(mode: str, store: Path, spec: JudgeSpec) -> LeasedJudge | None:
    """A judge from the service of `store` for an evaluation like `spec`, or None when there
    is no service (`mode` auto), none could be started (on), or it cannot serve this one
    (then the caller starts its judge cold, as without a service). Mode: KRUNG_SERVICE."""
    if mode == "off":
        return None
    if mode == "on":
        try:
            start(store)  # unless one runs, with this code
        except KrungError:  # the evaluation goes on cold; the service's log says why
            return None
    request = messages.Acquire(spec.key(), spec.to_json(), unix.code_stamp())
    try:
        with _connected(store) as sock:
            if sock is None:
                return None
            unix.send(sock, request)
            data, fds = unix.receive(sock, want_fd=True)
    except OSError:  # the service went away meanwhile
        return None
    try:
        reply = messages.replies(request).decode(data)
    except messages.ProtocolError:  # a service of other krung code: the judge starts cold
        reply = None
    if not isinstance(reply, messages.Handed) or not fds:
        for fd in fds:
            os.close(fd)
        return None
    return LeasedJudge(Channel(Connection(fds[0])), reply.pid, Path(reply.log), store)


def status(store: str | Path) -> messages.ServiceStatus | None:
    """What the store's service is doing, or None when none runs."""
    with contextlib.suppress(OSError):
        return _ask(store, messages.StatusOf())
    return None


def stop(store: str | Path, wait_s: float = 10.0) -> bool:
    """Stop the store's service and wait (up to `wait_s`) until it has exited; the
    evaluations it handed out go on. False when none ran."""
    try:
        stopped = _ask(store, messages.Stop()) is not None
    except OSError:
        return False
    _, lock_path, _ = paths(store)
    deadline = time.monotonic() + wait_s
    while stopped and time.monotonic() < deadline and _locked(lock_path):
        time.sleep(0.02)
    return stopped


def start(store: str | Path, pool: int = POOL, idle_s: float = IDLE_S,
          owner: int | None = None, wait_s: float = 60.0) -> messages.ServiceStatus:
    """Start a service for `store` (unless one runs with krung's code as it is now: one with
    older code is stopped) and return its status once it answers. Raises KrungError when it
    does not come up."""
    try:
        found: Any = status(store)
    except OtherCode:
        found = {}  # no stamp: stopped below
    if found is not None and found.get("stamp") == unix.code_stamp():
        return found
    if found is not None:
        stop(store)
        deadline = time.monotonic() + 10
        while status(store) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    _, _, folder = paths(store)
    folder.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "krung.host.service", "--store", str(Path(store).resolve()),
            "--pool", str(pool), "--idle", str(idle_s), "--detach"]
    if owner is not None:
        args += ["--owner", str(owner)]
    # It detaches (forks, and the first process exits once the service listens), so it is
    # nobody's child here: it may outlive this process, and leaves no zombie.
    with open(folder / "service.log", "ab") as log, contextlib.suppress(
            subprocess.TimeoutExpired):
        subprocess.run(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                       cwd=folder, start_new_session=True, timeout=wait_s)
    found = status(store)
    if found is not None:
        return found
    raise KrungError(f"the evaluation service for {store} did not start; its log ends with:\n"
                     f"{_tail(folder / 'service.log')}",
                     hint="run without it (KRUNG_SERVICE=off), or read the log above")


@contextlib.contextmanager
def serving(settings: Settings, pool: int = POOL, kinds: list[JudgeSpec] | None = None,
            start_one: bool = True) -> Iterator[None]:
    """A service for the length of a command (`krung watch`, `mcp`, `batch`, `suite`): the one
    that runs, its pool raised to `pool` judges per kind meanwhile, or one started here that
    ends with this process (unless not `start_one`, and KRUNG_SERVICE is not `on`). Judges
    start at once for each of `kinds` (default: evaluations with `settings`). Without a
    service (KRUNG_SERVICE=off, or it cannot start) the command goes on cold."""
    if settings.service == "off":
        yield
        return
    started = False
    previous = None
    try:
        found = status(settings.store)
        if found is not None and found.get("stamp") == unix.code_stamp():
            previous = _ask(settings.store, messages.Resize(pool))
        elif start_one or settings.service == "on":
            start(settings.store, pool=pool, owner=os.getpid())
            started = True
        else:
            kinds = []
        for spec in [JudgeSpec.of(settings, {})] if kinds is None else kinds:
            _ask(settings.store, messages.Prime(spec.key(), spec.to_json(), unix.code_stamp()))
    except (OSError, KrungError):
        pass
    try:
        yield
    finally:
        with contextlib.suppress(OSError, KrungError):
            if started:
                stop(settings.store)
            elif isinstance(previous, messages.Resized):
                _ask(settings.store, messages.Resize(previous.previous))


class OtherCode(KrungError):
    """The service answered in a way this krung does not declare: it runs other code."""


def _ask(store: str | Path, request: messages.ToService,
         timeout: float = REPLY_S) -> Any:
    """The service's reply to `request` (its messages.Reply, or messages.Refused), or None
    when no service runs."""
    with _connected(store, timeout) as sock:
        if sock is None:
            return None
        unix.send(sock, request)
        data, _ = unix.receive(sock)
    try:
        return messages.replies(request).decode(data)
    except messages.ProtocolError as exc:
        raise OtherCode(f"the krung service for {store} runs other krung code: {exc}",
                        hint="stop it (`krung service stop`); the next evaluation or "
                             "`krung service start` starts one with this code") from None


@contextlib.contextmanager
def _connected(store: str | Path, timeout: float = REPLY_S) -> Iterator[socket.socket | None]:
    """A connection to the store's service, or None when none listens (a socket left by a
    service that was killed is removed on the way)."""
    sock_path, lock_path, _ = paths(store)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with unix.address(sock_path) as address:
            try:
                sock.connect(address)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if isinstance(exc, ConnectionRefusedError):
                    _remove_if_stale(sock_path, lock_path)
                yield None
                return
        yield sock
    finally:
        sock.close()


def _locked(lock_path: Path) -> bool:
    """Whether a service holds the lock (it runs, or is starting, or still stopping)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _remove_if_stale(sock_path: Path, lock_path: Path) -> None:
    """Remove the socket when no service holds the lock (it was killed); a service that holds
    it is starting, and its socket is not to be touched."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        fd = None
    try:
        if fd is not None:  # held while the socket goes: a new service waits for it to bind
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with contextlib.suppress(FileNotFoundError):
            sock_path.unlink()
    except BlockingIOError:
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _tail(path: Path, size: int = 4000) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except OSError:
        return ""


# The service itself.


@dataclass
class _Pooled:
    """A judge started ahead of its evaluation."""

    process: subprocess.Popen
    channel: Channel
    log: Path
    worker_log: Path
    ready: bool = False


@dataclass
class _Pool:
    spec: messages.JudgeSpecJson
    judges: list[_Pooled] = field(default_factory=list)  # waiting for an evaluation
    running: int = 0  # handed out, still at work
    used_at: float = field(default_factory=time.monotonic)
    failures: int = 0  # judges that died before they were ready, in a row
    broken: str | None = None  # why no more are started

    def ready(self) -> int:
        return sum(j.ready for j in self.judges)


class Service:
    def __init__(self, store: Path, pool: int, idle_s: float, owner: int | None):
        self.store = store
        self.sock_path, self.lock_path, self.folder = paths(store)
        self.size = pool
        self.idle_s = idle_s
        self.owner = owner
        self.stamp = unix.code_stamp()
        self.lock = threading.Lock()
        self.pools: dict[str, _Pool] = {}
        # Judges handed out, until reaped: pid -> the process and its pool's key.
        self.busy: dict[int, tuple[subprocess.Popen, str]] = {}
        self.statuses: dict[int, int] = {}  # exit statuses of judges handed out
        self.numbers = itertools.count(1)
        self.served = 0
        self.started_at = time.time()
        self.used_at = time.monotonic()
        self.stopping = threading.Event()
        self.why_stopped = ""

    def run(self) -> None:
        listener = self._listen()
        serving: list[threading.Thread] = []
        try:
            while not self.stopping.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    conn = None
                if conn is not None:
                    serving = [t for t in serving if t.is_alive()]
                    serving.append(threading.Thread(target=self._serve, args=(conn,),
                                                    daemon=True))
                    serving[-1].start()
                self._tend()
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                self.sock_path.unlink()
            # The replies being sent go out first (`stop` said `Stopped` after it set the
            # flag: on a loaded machine the process ended before the reply left).
            deadline = time.monotonic() + REPLY_S
            for thread in serving:
                thread.join(max(0.0, deadline - time.monotonic()))
            self._drain()
            print(f"krung service stopped: {self.why_stopped}", flush=True)

    def _listen(self) -> socket.socket:
        lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + 1.0  # a client may hold it a moment (_remove_if_stale)
        while True:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UsageError(f"a krung service already runs for {self.store}",
                                     hint="`krung service status` shows it") from None
                time.sleep(0.05)
        os.ftruncate(lock_fd, 0)
        os.write(lock_fd, f"{os.getpid()}\n".encode())  # the fd stays open: the lock is held
        with contextlib.suppress(FileNotFoundError):  # a socket left by a killed service
            self.sock_path.unlink()
        for old in (*self.folder.glob("judge-*.log"), *self.folder.glob("worker-*.log")):
            old.unlink()  # a killed service's pool
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous = os.umask(0o077)  # the socket is its owner's alone: it runs code as them
        try:
            with unix.address(self.sock_path) as address:
                listener.bind(address)
        finally:
            os.umask(previous)
        listener.listen(64)
        listener.settimeout(0.2)
        print(f"krung service {os.getpid()} for {self.store}", flush=True)
        return listener

    # One request per connection.

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(REPLY_S)
            try:
                if not self._same_user(conn):
                    return
                data, _ = unix.receive(conn)
                try:
                    request = messages.TO_SERVICE.decode(data)
                except messages.ProtocolError as exc:
                    unix.send(conn, messages.Refused(str(exc)))
                    return
                getattr(self, f"_op_{request.TAG}")(conn, request)
            except (OSError, ValueError) as exc:
                print(f"a request failed: {exc}", flush=True)

    @staticmethod
    def _same_user(conn: socket.socket) -> bool:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        return uid == os.getuid()

    def _op_acquire(self, conn: socket.socket, request: messages.Acquire) -> None:
        with self.lock:
            self.used_at = time.monotonic()
            pool, why = self._pool_for(request)
            judge = self._take(pool) if pool is not None else None
            if judge is not None:
                assert pool is not None
                pool.running += 1  # from here, so a second caller does not count it idle
        if judge is None:
            unix.send(conn, messages.Refused(why))
            return
        try:
            unix.send(conn, messages.Handed(judge.process.pid, str(judge.log), judge.ready),
                  fd=judge.channel.fileno())
        except OSError:  # nothing went: the caller left, and the judge is as good as before
            with self.lock:
                assert pool is not None
                pool.running -= 1
                pool.judges.insert(0, judge)
            return
        except unix.Delivered:  # its channel went: it is the caller's, whether they use it or not
            pass
        judge.channel.close()  # the caller holds the only parent end now
        print(f"judge {judge.process.pid} handed out ({'ready' if judge.ready else 'starting'})",
              flush=True)
        with self.lock:
            self.busy[judge.process.pid] = (judge.process, request.key)
            self.served += 1

    def _op_prime(self, conn: socket.socket, request: messages.Prime) -> None:
        with self.lock:
            _, why = self._pool_for(request)
        unix.send(conn, messages.Primed() if why is None else messages.Refused(why))

    def _op_pool(self, conn: socket.socket, request: messages.Resize) -> None:
        with self.lock:
            previous, self.size = self.size, max(1, request.size)
            for pool in self.pools.values():
                self._fill(pool)
        unix.send(conn, messages.Resized(previous))

    def _op_exit(self, conn: socket.socket, request: messages.ExitOf) -> None:
        with self.lock:
            process, _ = self.busy.get(request.pid, (None, ""))
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=request.timeout)
        with self.lock:
            self._reap()
            unix.send(conn, messages.Exited(self.statuses.get(request.pid)))

    def _op_status(self, conn: socket.socket, request: messages.StatusOf) -> None:
        with self.lock:
            pools = [messages.PoolStatus(device=p.spec["device"], ready=p.ready(),
                                         starting=len(p.judges) - p.ready(),
                                         running=p.running, broken=p.broken)
                     for p in self.pools.values()]
            unix.send(conn, messages.ServiceStatus(
                pid=os.getpid(), store=str(self.store), stamp=self.stamp,
                started_at=self.started_at, pool_size=self.size, idle_s=self.idle_s,
                idle_left_s=round(self.idle_s - (time.monotonic() - self.used_at)),
                served=self.served, running=len(self.busy), pools=pools))

    def _op_stop(self, conn: socket.socket, request: messages.Stop) -> None:
        self.why_stopped = "asked to stop"
        self.stopping.set()
        unix.send(conn, messages.Stopped())

    # The pools (with self.lock held).

    def _pool_for(self, request: messages.Acquire | messages.Prime,
                  ) -> tuple[_Pool | None, str | None]:
        if request.stamp != self.stamp:
            self.why_stopped = "krung's source changed since it started"
            self.stopping.set()
            return None, "the service runs older krung code than yours; it is stopping"
        spec = request.spec
        key = request.key
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = _Pool(spec)
            for old in sorted(self.pools, key=lambda k: self.pools[k].used_at)[:-MAX_KINDS]:
                self._close(self.pools.pop(old))
        pool.used_at = time.monotonic()
        if pool.broken:
            return None, pool.broken
        self._fill(pool)
        return pool, None

    def _take(self, pool: _Pool) -> _Pooled | None:
        """The judge that has waited longest among the ready ones, else the one that started
        first (not warm yet, but ahead of a new one), else a new one."""
        if not pool.judges:
            pool.judges.append(self._spawn(pool.spec))
        if not pool.judges:
            return None
        chosen = next((j for j in pool.judges if j.ready), pool.judges[0])
        pool.judges.remove(chosen)
        return chosen

    def _fill(self, pool: _Pool) -> None:
        while len(pool.judges) + pool.running < self.size and not pool.broken:
            pool.judges.append(self._spawn(pool.spec))

    def _spawn(self, spec: messages.JudgeSpecJson) -> _Pooled:
        number = next(self.numbers)
        log = self.folder / f"judge-{number}.log"
        worker_log = self.folder / f"worker-{number}.log"
        judge = JudgeSpec(spec["device"], bool(spec["cuda_ipc"]), int(spec["max_file_bytes"]),
                          dict(spec["env"]))
        process, channel = spawn("krung.judge", judge.args(log, worker_log, pooled=True),
                                 log=log, env=judge.env, new_session=True)
        return _Pooled(process, channel, log, worker_log)

    def _close(self, pool: _Pool) -> None:
        for judge in pool.judges:
            judge.channel.close()  # it sees the end of its channel and ends its worker too
            with contextlib.suppress(ProcessLookupError):
                judge.process.send_signal(signal.SIGTERM)
            for path in (judge.log, judge.worker_log):
                with contextlib.suppress(OSError):
                    path.unlink()
        pool.judges.clear()

    # Housekeeping, between connections.

    def _tend(self) -> None:
        with self.lock:
            for pool in self.pools.values():
                for judge in list(pool.judges):
                    if not judge.ready and judge.channel.poll(0):
                        self._hear(pool, judge)
            self._reap()
            idle = 0.0 if self.busy else time.monotonic() - self.used_at
        if idle > self.idle_s:
            self.why_stopped = f"idle for {self.idle_s:g} s"
            self.stopping.set()
        if self.owner is not None and not unix.alive(self.owner):
            self.why_stopped = f"the process it served ({self.owner}) ended"
            self.stopping.set()

    def _hear(self, pool: _Pool, judge: _Pooled) -> None:
        """A pooled judge spoke before its evaluation: it is ready, or it died."""
        try:
            message = judge.channel.recv(expect=messages.FROM_JUDGE)
        except (ChannelClosed, ValueError):
            message = None
        if isinstance(message, messages.Ready):
            judge.ready = True
            pool.failures = 0
            return
        pool.judges.remove(judge)
        judge.channel.close()
        judge.process.kill()
        code = judge.process.wait()
        pool.failures += 1
        print(f"judge {judge.process.pid} exited with status {code} before it was ready; its "
              f"log ends with:\n{_tail(judge.log)}", flush=True)
        if pool.failures >= START_FAILURES:
            pool.broken = (f"{pool.failures} judges in a row exited before they were ready "
                           f"(status {code}); the last one's log ends with:\n{_tail(judge.log)}")
        self._fill(pool)

    def _reap(self) -> None:
        """Note the judges whose evaluation ended, and start their successors."""
        for pid, (process, key) in list(self.busy.items()):
            code = process.poll()
            if code is not None:
                self.statuses[pid] = code
                del self.busy[pid]
                self.used_at = time.monotonic()  # idle counts from the last evaluation's end
                print(f"judge {pid} exited with status {code}", flush=True)
                pool = self.pools.get(key)
                if pool is not None:
                    pool.running -= 1
                    self._fill(pool)
        while len(self.statuses) > 1000:  # the oldest are nobody's concern any more
            del self.statuses[next(iter(self.statuses))]

    def _drain(self) -> None:
        with self.lock:
            for pool in self.pools.values():
                self._close(pool)


def _until_listening(store: Path, child: int, timeout_s: float = 60.0) -> int:
    """0 once the service in `child` (or another one, started first) answers; 1 if `child`
    exits first or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if status(store) is not None:
            return 0
        if os.waitpid(child, os.WNOHANG) != (0, 0):
            return 0 if status(store) is not None else 1
        time.sleep(0.05)
    return 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m krung.host.service")
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--pool", type=int, default=POOL)
    parser.add_argument("--idle", type=float, default=IDLE_S)
    parser.add_argument("--owner", type=int, help="exit when this process has ended")
    parser.add_argument("--detach", action="store_true",
                        help="serve from a child process; exit once it listens")
    args = parser.parse_args(argv)
    if args.detach:
        child = os.fork()
        if child:
            os._exit(_until_listening(args.store, child))
    service = Service(args.store.resolve(), max(1, args.pool), args.idle, args.owner)
    signal.signal(signal.SIGTERM, lambda *_: service.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: service.stopping.set())
    try:
        service.run()
    except UsageError as exc:
        print(f"{type(exc).__name__}: {exc.message}", flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
