"""The judge's handle on the candidate worker: start it, ask it things, survive it.

Every request has a timeout. A worker that hangs is asked for its Python stack (SIGUSR1,
faulthandler) and killed with its whole process group; a worker that dies is described by
its exit status or signal, with the tail of its log and the version's line where the stack
shows one. Either way the rung fails with those facts and krung carries on.

A worker may be started before the evaluation it serves is known (a judge of the warm
service starts its worker in advance): what the version's import needs from the evaluation
(environment variables, the working directory) travels with the `load` request instead
(`at_load`), and the log is moved into the run's folder once there is one (`move_log`).

The worker is fenced in (docs/trust.md): it gets an allow-listed environment (`worker_env`: no
KRUNG_* setting, no store path; HOME and TMPDIR in a scratch folder of its own, which is also
the version's working directory), and on loading the version it raises its own walls
(krung.worker.guard.restrict: writes only to its scratch, the version's own compile caches
(`version_caches`), the folders it is given and /dev; no TCP). Ending it ends everything
below it, even what the version moved to a session of its own or double-forked (`end_tree`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from krung.judge import scratch as scratches
from krung.protocol import build_cache, messages
from krung.protocol.channel import Channel, ChannelClosed, TooLarge
from krung.protocol.errors import RungFailed
from krung.worker import zygote as zygotes
from krung.worker.zygote import Forked, Zygote

LOG_TAIL_BYTES = 16_384

_SIGNALS = {
    signal.SIGSEGV: "SIGSEGV (segmentation fault: a bad pointer in native code)",
    signal.SIGBUS: "SIGBUS (bus error: a misaligned or unmapped access in native code)",
    signal.SIGABRT: "SIGABRT (abort: a failed assertion in native code, or a C++ exception)",
    signal.SIGFPE: "SIGFPE (arithmetic fault in native code)",
    signal.SIGILL: "SIGILL (illegal instruction)",
    signal.SIGKILL: "SIGKILL (killed: out of host memory, or by another process)",
    signal.SIGXFSZ: "SIGXFSZ (wrote more output than the file size limit allows)",
}

_STARTED: weakref.WeakSet[Candidate] = weakref.WeakSet()  # for kill_all

# What a worker keeps of the judge's environment: what Python, torch, the DSLs, CUDA and the
# compilers they call read. Nothing else crosses: no KRUNG_* setting (the worker takes its
# settings as arguments), so no store path; no credentials, no caller's state.
KEPT_VARIABLES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME",
                            "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CC", "CXX",
                            "MAX_JOBS"})
KEPT_PREFIXES = ("LC_", "PYTHON", "CUDA_", "NVIDIA_", "NVCC_", "TRITON_", "TORCH_",
                 "TORCHINDUCTOR_", "PYTORCH_", "CUTE_DSL_", "CUTLASS_", "TILELANG_", "TVM_",
                 "OMP_", "MKL_", "OPENBLAS_", "CUBLAS_", "CUDNN_")
# The compile caches a version fills are its own, named by its content (docs/trust.md): the
# same version evaluated again finds them warm, and no version can plant an entry that another
# version's run loads. XDG_CACHE_HOME (torch's kernel cache, torch_extensions, ...) is the
# version's folder itself. The judge, which runs the reference, reads none of them.
VERSION_CACHES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
                  "TILELANG_CACHE_DIR": "tilelang"}
# A cache the caller chose (shared with the judge and their other tools) keeps the versions'
# folders in this folder beneath it; neither the cache nor this folder is writable to a version.
BENEATH_CHOSEN = "krung-versions"


def worker_cache() -> Path:
    """The workers' cache folder: krung/worker under the user's cache folder (the versions'
    compile caches are in its `versions/`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "krung" / "worker"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable home: a folder of this user's in the temp folder
        folder = Path(tempfile.gettempdir()) / f"krung-worker-cache-{os.getuid()}"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def version_caches(cache: Path, sha256: str, environ: dict[str, str] | None = None
                   ) -> dict[str, str]:
    """The environment that gives the version whose bytes have `sha256` compile caches of its
    own: `caches_in` `cache`/versions/<its sha256's first 16 hex digits>; a cache `environ`
    (this process's) names instead (TORCH_EXTENSIONS_DIR too) gets the version's folder
    beneath it."""
    environ = os.environ if environ is None else environ
    name = sha256[:16]
    env = caches_in(cache / "versions" / name)
    for variable in (*VERSION_CACHES, "TORCH_EXTENSIONS_DIR"):
        if environ.get(variable):
            env[variable] = str(Path(environ[variable]) / BENEATH_CHOSEN / name)
    return env


def caches_in(folder: Path) -> dict[str, str]:
    """XDG_CACHE_HOME `folder`, with Triton's, inductor's and TileLang's caches in it."""
    return {"XDG_CACHE_HOME": str(folder),
            **{variable: str(folder / name) for variable, name in VERSION_CACHES.items()}}


def worker_env(scratch: Path, cache: Path, environ: dict[str, str] | None = None,
               sha256: str | None = None, shared: bool = False) -> dict[str, str]:
    """The worker's environment: the allow-listed variables of `environ` (this process's),
    HOME and TMPDIR in `scratch`, the compile caches of the version with `sha256` in `cache`
    (`version_caches`), and the user's site-packages where they were (HOME moved). Without
    `sha256` (a worker started before its version is known, which the `load` request tells
    the caches) and for CUDA's JIT cache, which CUDA reads once when it starts, the caches
    are the worker's own, in its scratch, gone with it. `shared`, for a worker that raises
    no walls (a GPU's, unless KRUNG_SANDBOX=on), where caches of its own would protect
    nothing: the workers' shared caches in `cache`, so that Triton's launchers and driver
    stubs, compiled with the host compiler, stay warm from one version to the next."""
    import site

    environ = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in environ.items()
           if k in KEPT_VARIABLES or k.startswith(KEPT_PREFIXES)}
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONUNBUFFERED="1",
               CUDA_CACHE_PATH=str(scratch / "nv"))
    if sha256:
        env.update(version_caches(cache, sha256, environ))
    elif shared:
        env["XDG_CACHE_HOME"] = str(cache)
        for variable, name in VERSION_CACHES.items():
            env.setdefault(variable, str(cache / name))
    else:
        env.update(caches_in(scratch / "cache"))
        env.pop("TORCH_EXTENSIONS_DIR", None)  # torch's default: beneath XDG_CACHE_HOME
    # The worker starts in its scratch: the import path must not depend on this process's
    # working directory (a relative PYTHONPATH, or krung importable from here only).
    paths = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds krung
    if root == os.getcwd() and root not in paths:
        paths.insert(0, root)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUSERBASE", site.getuserbase())
    return env


def cache_folders(env: dict[str, str]) -> list[str]:
    """The compile caches a worker's environment names (`version_caches`): writable inside
    the walls, so made now (the walls allow only folders that exist)."""
    folders = [env[v] for v in ("XDG_CACHE_HOME", *VERSION_CACHES, "TORCH_EXTENSIONS_DIR",
                                "CUDA_CACHE_PATH") if env.get(v)]
    for folder in folders:
        with contextlib.suppress(OSError):
            Path(folder).mkdir(parents=True, exist_ok=True)
    return folders


def hidden_store(store: Path, run_dir: Path, needed: list[Path]) -> tuple[list[str], list[str]]:
    """What of the store the version's process must not read (other runs' folders, with
    their versions, and the database), and what of it stays (its own run's folder, the CUDA
    C++ build cache): the store's whole folder (the service's socket too) where nothing the
    worker needs lies beneath it, else its runs folder and database files alone."""
    import sys

    store = Path(os.path.abspath(store))
    keep = [str(run_dir.resolve()), str(build_cache.root_for(run_dir.resolve()))]
    needed = [*needed, Path(sys.prefix), *(Path(p) for p in sys.path if p)]
    folder = store.parent
    if not any(_beneath(Path(os.path.abspath(p)), folder) for p in needed):
        return [str(folder)], keep
    files = [store.with_name(store.name + tail) for tail in ("", "-wal", "-shm", "-journal")]
    return [str(folder / "runs"), *(str(f) for f in files if f.exists())], keep


def _beneath(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def kill_all() -> None:
    """Kill every worker this process started, with everything below them: the judge's way
    out when it is stopped (SIGTERM) or its caller is gone."""
    for candidate in list(_STARTED):
        if candidate.process is not None and candidate.process.returncode is None:
            end_tree(candidate.process.pid)
        if candidate.scratch is not None:
            scratches.remove(candidate.scratch, candidate._owner)
            candidate._owner = None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def _stat(pid: int | str) -> list[str]:
    """/proc/<pid>/stat's fields after the command (state first); [] once it is gone. `pid`
    may be "<pid>/task/<tid>", a thread's."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _still_running(pid: int) -> bool:
    """Whether a thread of `pid` is still running or runnable: a SIGSTOP takes effect when
    each thread is next scheduled, a moment later on a loaded machine. (A thread asleep, in
    a driver call say, runs no code of its own before it stops.)"""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any(_stat(f"{pid}/task/{task}")[:1] == ["R"] for task in tasks)


def _living_descendants(pid: int) -> list[int]:
    below, stack = [], _children(pid)
    while stack:
        child = stack.pop()
        if _stat(child)[:1] not in ([], ["Z"]):  # gone or a zombie: nothing left to stop
            below.append(child)
        stack += _children(child)
    return below


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def end_tree(pid: int) -> None:
    """SIGKILL process `pid` and every process below it, whatever session or group they moved
    to. The worker is every orphan's subreaper below it (krung.worker.guard.adopt_orphans),
    so a double-forked child stays below it; the worker is stopped first so nothing below
    is reparented away, and each found process is stopped before it is killed, so none
    forks faster than it is found."""
    _signal(pid, signal.SIGSTOP)
    for _ in range(1000):
        below = _living_descendants(pid)
        if not below:
            break
        for child in below:
            _signal(child, signal.SIGSTOP)
        for child in below:
            _signal(child, signal.SIGKILL)
    _signal(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # what it left in its group (its tool's children too)


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[list[int]]:
    """Process `pid` and every process below it stopped (SIGSTOP, which none can catch) for
    the block, then continued: what a version left running (threads, children) takes no CPU
    while the judge times the reference. Yields the pids stopped."""
    _signal(pid, signal.SIGSTOP)
    held = [pid]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until all found are stopped (none forks once stopped)
        found = [p for p in _living_descendants(pid) if p not in held]
        for child in found:
            _signal(child, signal.SIGSTOP)
        held += found
        if not found and not any(_still_running(p) for p in held):
            break
        time.sleep(0.001)
    try:
        yield held
    finally:
        for held_pid in reversed(held):
            _signal(held_pid, signal.SIGCONT)


def end_strays() -> None:
    """Kill and reap the orphans of workers that were reparented to this process, its
    subreaper (a version that turned its worker's subreaper off lets them climb here):
    children in another session than this process's and not a running worker. What the judge
    starts itself (nvcc, the artifacts' build process) stays in its session; a worker's
    descendants can never enter it."""
    workers = {c.process.pid for c in list(_STARTED)
               if c.process is not None and c.process.returncode is None}
    session = os.getsid(0)
    for child in _children(os.getpid()):
        if child in workers:
            continue
        with contextlib.suppress(OSError):
            if os.getsid(child) == session:
                continue
        end_tree(child)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child, 0)


def _adopt_orphans() -> None:
    """Become the subreaper of every process below this one (once; harmless where refused)."""
    from krung.worker.guard import adopt_orphans

    adopt_orphans()


def raises_walls(mode: str, device: str) -> bool:
    """Whether a worker on `device` raises its Landlock walls under KRUNG_SANDBOX=`mode`."""
    return mode == "on" or (mode == "cpu" and device == "cpu")


def _ended_how(code: int | None) -> str:
    """How a process ended, from its exit status."""
    if code is None:
        return "ended"
    if code < 0:
        return f"was killed by {_SIGNALS.get(signal.Signals(-code), signal.Signals(-code).name)}"
    return f"exited with status {code}"


class WorkerStartFailed(RuntimeError):
    """The run's own worker died before it said hello: before any of the version's code ran
    (krung's imports, CUDA's start, which fails where other processes left a GPU no memory
    for a context), so krung's failure or the machine's, never a verdict on the version: an
    error of the judge, tried once more in fresh processes, then exit 3."""

    def __init__(self, how: str, details: str | None):
        lines = [line.strip() for line in (details or "").splitlines() if line.strip()]
        said = f"; its log ends with: {lines[-1]}" if lines else ""
        super().__init__(f"krung could not start the version's process: it {how} before it "
                         f"said hello, before any of the version's code ran{said}")
        self.details = details


class Candidate:
    def __init__(self, device: str, run_dir: Path, solution: Path, cuda_ipc: bool = False,
                 max_file_bytes: int = 1 << 30, prefix: list[str] | None = None,
                 log_name: str = "worker.log", env: dict[str, str] | None = None,
                 exit_wait_s: float = 10):
        self.device = device
        # How long a worker whose channel closed may take to exit before it is killed; a
        # tool it runs under writes its report then (compute-sanitizer: give it longer).
        self.exit_wait_s = exit_wait_s
        self.extra_env = env or {}
        self.prefix = prefix or []  # a tool to run the worker under (compute-sanitizer)
        self.cuda_ipc = cuda_ipc
        self.max_file_bytes = max_file_bytes
        self.log = run_dir / log_name
        self.solution = solution
        self.process: subprocess.Popen | Forked | None = None
        self.channel: Channel | None = None
        self.facts: dict[str, Any] = {}
        self.dead: str | None = None  # why the worker is gone, once it is
        self.dead_hint: str | None = None  # what to do about it, where the worker said
        # how its start failed, told again
        self.failed_start: RungFailed | WorkerStartFailed | None = None
        self.started_at = 0.0
        # Added to the `load` request: {"env": {...}, "cwd": "..."} for the version's import.
        self.at_load: dict[str, Any] = {}
        # Folders of the run the version's process may write to besides its scratch (the
        # artifacts rung's, the DSLs' dumps): added to the `load` request's sandbox.
        self.writable: list[Path] = []
        self.scratch: Path | None = None  # its HOME, TMPDIR and working directory
        self._owner: int | None = None  # the scratch's lock (krung.judge.scratch)
        self.cache = worker_cache()
        self.sandbox: dict[str, Any] | None = None  # what the worker said applied, once loaded
        self.cache_dirs: list[str] = []
        self.walls = device == "cpu"  # Landlock asked for (KRUNG_SANDBOX: `raises_walls`)
        # Hidden from the version behind the walls, and kept of them (`hidden_store`).
        self.hidden: list[str] = []
        self.keep: list[str] = []

    def start(self, preload: tuple[str, ...] = (), zygote: Zygote | None = None) -> None:
        """Start the worker; `preload`: DSL packages it imports before any version (it still
        tells which of them the version uses); `zygote`: the worker forked already, made the
        worker here (krung.worker.zygote), unless it runs under a tool."""
        # No MALLOC_PERTURB_ here: it made every allocation of the process a memset, the
        # channel's receive buffers too (a 128 MiB input took 27 s to arrive). The worker
        # poisons the allocations of the version's checked calls alone (guard.poisoned).
        scratches.sweep_once()
        self.scratch, self._owner = scratches.make()
        # Caches of its own where it will raise walls (then named by its version at load).
        env = {**worker_env(self.scratch, self.cache, shared=not self.cpu_only()),
               **self.extra_env}
        self.cache_dirs = cache_folders(env)
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        self.started_at = time.perf_counter()
        args = ["--device", self.device, "--max-file-bytes", str(self.max_file_bytes)]
        if self.cuda_ipc:
            args.append("--cuda-ipc")
        if not self.prefix:  # CUPTI would collide with ncu's or compute-sanitizer's hooks
            args.append("--warm-profiler")
        if self.cpu_only() and not self.prefix:  # where the store can be hidden at load
            args.append("--private-mounts")
        for package in preload:
            args += ["--preload", package]
        _adopt_orphans()
        self.process, self.channel = zygotes.start(
            zygote, args, log=self.log, env=env, cwd=self.scratch, module="krung.worker.serve",
            prefix=self.prefix)
        _STARTED.add(self)

    def cpu_only(self) -> bool:
        """Whether the worker will run on the CPU (`auto` on a machine with no NVIDIA GPU):
        there alone it enters a mount namespace of its own for now (CUDA has not run in one
        on the H200 yet)."""
        return self.device == "cpu" or (self.device == "auto"
                                        and not os.path.exists("/dev/nvidiactl"))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The worker and all below it stopped for the block (`stopped`), where it runs."""
        if self.process is None or self.process.returncode is not None:
            yield
            return
        with stopped(self.process.pid):
            yield

    def sandbox_request(self, build_cache: str | None) -> dict[str, Any] | None:
        """Where the version's process may write: its scratch, its compile caches, the run's
        folders it was given, torch's build cache (CUDA C++), /dev (the GPU, shared memory).
        Under a tool (ncu, compute-sanitizer), whose part inside the worker talks to the tool
        and keeps its lock files where it chooses, TCP and the temp folder stay open too."""
        if not self.walls:
            return None
        writable = [self.scratch, *self.cache_dirs, *self.writable, build_cache, "/dev"]
        if self.prefix:
            writable += [tempfile.gettempdir(), "/tmp"]
        # absolute: the worker resolves them in its scratch
        return {"writable": [os.path.abspath(w) for w in writable if w],
                "network": bool(self.prefix), "hidden": self.hidden, "keep": self.keep}

    def move_log(self, path: Path) -> None:
        """Move the worker's log (it keeps writing to it) to `path`, in the run's folder."""
        if path == self.log:
            return
        try:
            os.replace(self.log, path)
        except OSError:  # another file system: the log stays where it is, and is read there
            return
        self.log = path

    def use_cuda_ipc(self) -> None:
        """Send and take GPU tensors by IPC handle; the worker does so when it runs on CUDA."""
        assert self.channel is not None
        self.channel.cuda_ipc = self.cuda_ipc

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def hello(self, timeout: float) -> dict[str, Any]:
        """The worker's facts (messages.Hello as a dict, with its start-up time)."""
        if self.failed_start is not None:
            raise self.failed_start
        if not self.facts:
            try:
                said = self._receive("starting the worker", timeout, messages.HELLO,
                                     limit="--compile-timeout")
            except RungFailed as exc:
                # A death before the hello of the run's own worker, started before any code
                # of the version's ran; not one a tool runs while the version's worker lives
                # (its memory held could be why) nor a slow start (the limit's to say).
                own = exc.error_type == "WorkerCrashed" and not self.prefix
                how = _ended_how(self.process.returncode) if self.process else "ended"
                self.failed_start = WorkerStartFailed(how, exc.details) if own else exc
                raise self.failed_start from exc
            self.facts = {**said, "startup_s": round(time.perf_counter() - self.started_at, 3)}
        return self.facts

    def request(self, message: messages.ToWorker | dict[str, Any], timeout: float, what: str,
                max_tensor_bytes: int | None = None, limit: str = "--timeout") -> Any:
        """Send one request (a dict is taken as the message it spells) and return the
        worker's reply to it, checked: its messages.Reply, or messages.Failed. RungFailed if
        the worker fails us (hangs, dies, or sends what krung does not declare). `limit` is
        the option that sets `timeout`, named in the hint when it runs out."""
        if isinstance(message, dict):
            message = messages.TO_WORKER.decode(message)
        self.hello(timeout)
        assert self.channel is not None
        if isinstance(message, messages.Load):
            at_load = self._version_env(message)  # before the walls: they name its caches
            message = dataclasses.replace(message, **at_load, cwd=str(self.scratch))
            message = dataclasses.replace(message,
                                          sandbox=self.sandbox_request(message.build_cache))
        self._check_alive()
        try:
            self.channel.send(message)
        except ChannelClosed:
            refused = self._refusal(messages.replies(message), what)
            if refused is None:
                self._died(what)
            return refused
        reply = self._receive(what, timeout, messages.replies(message), max_tensor_bytes, limit)
        for key in ("device_peak_mib", "host_peak_mib"):  # as the worker said: figures to
            peak = getattr(reply, key, None)               # read, never a verdict
            if peak is not None:
                self.facts[key] = max(peak, self.facts.get(key, 0.0))
        if isinstance(reply, messages.Failed) and reply.error.get("kind") == "intake":
            self._ended(reply, what)  # the worker could not take it and is ending
        if isinstance(reply, messages.Loaded):
            self.sandbox = reply.sandbox
        elif isinstance(message, messages.Load) and isinstance(reply, messages.Failed):
            self.sandbox = reply.sandbox or self.sandbox  # the import failed inside them
        return reply

    def _check_alive(self) -> None:
        if self.dead:
            raise RungFailed("WorkerDead", f"the version's process is gone ({self.dead})",
                             self.dead_hint or "fix the failure reported by the earlier rung "
                                               "first")

    def _refusal(self, expect: messages.Replies, what: str) -> Any:
        """The Failed a worker sent before it closed the channel on a request it could not
        take (its inputs did not fit the GPU, say) while the request was still being sent;
        None if it said nothing (a Failed carries no tensors: anything else is refused)."""
        assert self.channel is not None
        try:
            reply = self.channel.recv(0, expect) if self.channel.poll(1.0) else None
        except Exception:  # a malformed or forged last word is no word
            reply = None
        if not isinstance(reply, messages.Failed):
            return None
        self._ended(reply, what)
        return reply

    def _ended(self, reply: messages.Failed, what: str) -> None:
        """A worker that could not take a request ends: let it (a tool it runs under writes
        its summary on the way out), then make sure; later requests find it gone, and why."""
        assert self.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=self.exit_wait_s)
        self.kill()
        self.dead = f"it could not take {what}: {reply.error.get('message', '')}"
        self.dead_hint = reply.error.get("hint")

    def _version_env(self, load: messages.Load) -> dict[str, Any]:
        """`at_load`, its environment with the compile caches of the version `load` names
        (`version_caches`), which become the version's writable caches (`cache_dirs`); where
        no walls are raised, the caches the worker started with."""
        if not self.walls:
            return self.at_load
        sha256 = load.sha256 or hashlib.sha256(Path(load.path).read_bytes()).hexdigest()
        caches = version_caches(self.cache, sha256, {**os.environ, **self.extra_env})
        self.cache_dirs = cache_folders(caches)
        at_load = {**self.at_load, "env": {**(self.at_load.get("env") or {}), **caches}}
        if load.build_cache:  # torch's CUDA C++ builds too: the store's cache for this version
            at_load["build_cache"] = str(build_cache.version_root(load.build_cache, sha256))
        return at_load

    def _receive(self, what: str, timeout: float, expect: messages.Replies,
                 max_tensor_bytes: int | None = None, limit: str = "--timeout") -> Any:
        self._check_alive()
        assert self.channel is not None
        if not self.channel.poll(timeout):
            self._timed_out(what, timeout, limit)
        try:
            return self.channel.recv(max_tensor_bytes, expect)
        except ChannelClosed:
            self._died(what)
        except TooLarge as exc:
            self.kill()
            self.dead = "its reply was too large"
            raise RungFailed("OutputTooLarge", f"{exc} (in {what})",
                             "return outputs of the reference's shapes and dtypes") from None
        except ValueError as exc:  # messages.ProtocolError, or not JSON at all: something
            # other than the worker's loop wrote to the channel (the version can)
            self.kill()
            self.dead = "it sent a malformed message"
            raise RungFailed("ProtocolError", f"the version's process sent a malformed message "
                             f"during {what}: {exc}",
                             "a version must not write to krung's channel (its file "
                             "descriptor is the worker's, not the version's)") from None
        raise AssertionError("unreachable")

    def _timed_out(self, what: str, timeout: float, limit: str) -> None:
        assert self.process is not None
        try:  # faulthandler in the worker writes every thread's stack to the log
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
        except ProcessLookupError:
            pass
        self.kill()
        self.dead = f"killed after {what} hung"
        tail = self.log_tail()
        raise RungFailed(
            "Timeout", f"{what} did not finish within {timeout:g} s; the worker was killed",
            "look for an endless loop (a Python loop, or a GPU kernel whose loop bound or mask "
            "never ends it); the stack at the moment it was stopped is in the details; raise "
            f"the limit with {limit} if the version is only slow",
            location=self._location(tail), details=tail)

    def _died(self, what: str) -> None:
        assert self.process is not None
        try:
            code = self.process.wait(timeout=self.exit_wait_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.wait()
        self.kill()  # whatever it left behind in its process group
        how = _ended_how(code)
        if code == 0:
            how += ": the version (or something it called) ended the process, e.g. with os._exit"
        self.dead = f"it {how} during {what}"
        tail = self.log_tail()
        raise RungFailed("WorkerCrashed", f"the version's process {how} during {what}",
                         "a version must return its outputs; read the log tail in the details "
                         "for the native stack or the last message",
                         location=self._location(tail), details=tail)

    def _location(self, log_tail: str) -> str | None:
        """The version's innermost line in a faulthandler or traceback dump, if any."""
        pattern = re.compile(r'File "' + re.escape(str(self.solution)) + r'", line (\d+)')
        found = pattern.findall(log_tail)
        return f"{self.solution}:{found[-1]}" if found else None

    def log_tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - LOG_TAIL_BYTES))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return text if size <= LOG_TAIL_BYTES else "...\n" + text.split("\n", 1)[-1]

    def kill(self) -> None:
        """End the worker, everything it started, and its scratch folder."""
        if self.process is None:
            return
        if self.process.poll() is None:  # not yet reaped: its pid is still its own
            end_tree(self.process.pid)
        else:  # what it left in its group; the rest climbed to this process (end_strays)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        end_strays()
        if self.scratch is not None:
            scratches.remove(self.scratch, self._owner)
            self._owner = None

    def close(self) -> None:
        """End the worker. It keeps nothing worth a graceful exit, and killing it spares the
        half second torch takes to tear down."""
        self.kill()
        if self.channel is not None:
            self.channel.close()

    def finish(self, timeout: float) -> int | None:
        """End the worker by closing its channel and let it exit by itself, for a tool it
        runs under that writes its report at exit (compute-sanitizer's error summary).
        Killed after `timeout` s; returns its exit status, or None when it had to be killed."""
        if self.channel is not None:
            self.channel.close()
        code = None
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.process.wait(timeout=timeout)
        self.kill()  # what it left behind in its process group, or itself if it hung
        return code
