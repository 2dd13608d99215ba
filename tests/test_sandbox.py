"""The worker's walls (krung.judge.candidate.worker_env, krung.worker.guard.restrict):
versions that try to reach the store, the problem, the network or the Python installation,
or to outlive their run, and an honest version using its scratch folder, which passes.

Real `krung` commands on the CPU. Where the kernel has no Landlock the tests of what only
Landlock stops are skipped, saying so; the environment's allow-list holds everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import torch

from krung.judge.candidate import worker_env
from krung.worker.guard import landlock_abi
from tests.conftest import PROBLEMS
from tests.test_red_team import first_failure, rungs_of
from tests.test_scale import TRITON

RUNGS = "static,compile,run"
ABI = landlock_abi()
needs_landlock = pytest.mark.skipif(ABI == 0, reason="this kernel has no Landlock: the "
                                    "version's process may write wherever its user may")


def run_json(result) -> dict:
    return result.json()


def test_the_worker_environment_is_an_allow_list(tmp_path):
    environ = {"PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "3",
               "TRITON_PRINT_AUTOTUNING": "1", "PYTHONPATH": "rel/src",
               "KRUNG_STORE": "/secret/store/krung.db", "KRUNG_DEVICE": "cpu",
               "AWS_SECRET_ACCESS_KEY": "abc", "HOME": "/home/user", "TMPDIR": "/var/tmp",
               "SSH_AUTH_SOCK": "/tmp/ssh-agent"}
    scratch, cache = tmp_path / "scratch", tmp_path / "cache"
    env = worker_env(scratch, cache, environ)
    assert not [k for k in env if k.startswith("KRUNG_")]
    assert "/secret/store" not in json.dumps(env)
    assert "AWS_SECRET_ACCESS_KEY" not in env and "SSH_AUTH_SOCK" not in env
    assert (env["PATH"], env["LC_ALL"], env["CUDA_VISIBLE_DEVICES"]) == (
        "/usr/bin", "C.UTF-8", "3")
    assert env["TRITON_PRINT_AUTOTUNING"] == "1"
    assert env["HOME"] == env["TMPDIR"] == str(scratch)
    # the caches: the worker's own until its version is known (test_version_caches.py)
    assert env["TRITON_CACHE_DIR"] == str(scratch / "cache" / "triton")
    assert env["PYTHONPATH"] == os.path.abspath("rel/src")  # the worker starts elsewhere
    # a cache the caller chose holds the version's beneath it
    chosen = worker_env(scratch, cache, {**environ, "TRITON_CACHE_DIR": "/fast/triton"},
                        sha256="ab" * 32)
    assert chosen["TRITON_CACHE_DIR"] == "/fast/triton/krung-versions/" + "ab" * 8


HONEST_SCRATCH = """
    import os, tempfile
    STORE = {store!r}
    PROBLEM = {problem!r}
    assert not [k for k in os.environ if k.startswith("KRUNG_")], sorted(os.environ)
    assert not [k for k, v in os.environ.items() if STORE in v or PROBLEM in v]
    here = os.getcwd()
    assert here == os.environ["HOME"] == tempfile.gettempdir(), (here, os.environ["HOME"])
    assert not here.startswith((STORE, PROBLEM)), here
    with open("notes.txt", "w") as f:  # its working folder
        f.write("scratch")
    with tempfile.NamedTemporaryFile("w") as f:  # the temp folder
        f.write("scratch")
    def kernel(x):
        return x * 2 + 1
"""


def test_an_honest_version_uses_its_scratch_and_sees_no_store(krung, scale_problem, version,
                                                              store):
    source = textwrap.dedent(HONEST_SCRATCH).format(store=str(store.parent),
                                                    problem=str(scale_problem))
    result = krung("run", scale_problem, version("scratch", source), "--json", "--rungs", RUNGS)
    assert result.code == 0, result.stdout + result.stderr
    sandbox = run_json(result)["env"]["sandbox"]
    if ABI:
        assert sandbox["sandbox"] == "landlock" and sandbox["landlock_abi"] == ABI, sandbox
    else:
        assert sandbox["sandbox"] == "none", sandbox
    # The scratch folder went with the worker.
    assert not [w for w in sandbox.get("writable", []) if "krung-worker-" in w
                and Path(w).exists()]


WRITES_INTO = """
    from pathlib import Path
    Path({target!r}, "planted.py").write_text("def kernel(x):\\n    return x\\n")
    def kernel(x):
        return x * 2 + 1
"""


@needs_landlock
@pytest.mark.parametrize("where", ["problem", "store", "other_run"])
def test_a_version_cannot_write_to_the_problem_the_store_or_other_runs(
        krung, scale_problem, version, store, where):
    if where == "other_run":
        first = krung("run", scale_problem, version("first", "def kernel(x):\n    return x * 2 "
                                                             "+ 1\n"), "--json", "--rungs", "static")
        target = store.parent / "runs" / run_json(first)["run_id"]
        assert target.is_dir()
    else:
        target = scale_problem if where == "problem" else store.parent
        target.mkdir(parents=True, exist_ok=True)
    source = textwrap.dedent(WRITES_INTO).format(target=str(target))
    result = krung("run", scale_problem, version("plants", source), "--json", "--rungs", RUNGS)
    assert result.code == 1, result.stdout + result.stderr
    failed = first_failure(result)
    # Where the store is hidden (a mount namespace), it is an empty read-only folder there.
    hidden = where != "problem" and run_json(result)["env"]["sandbox"].get("hidden")
    expected = {"store": "OSError", "other_run": "FileNotFoundError"}[where] if hidden else \
        "PermissionError"
    assert (failed["name"], failed["error_type"]) == ("compile", expected), failed
    assert "planted.py" in failed["error"], failed
    assert not (target / "planted.py").exists()


READS = """
    import os
    from pathlib import Path
    for path in {hidden!r}:  # another run's files, the database, the service's socket
        assert not os.path.exists(path), path
        try:  # nor through the judge's view of the file system
            open(f"/proc/{{os.getppid()}}/root{{path}}").close()
        except OSError:
            pass
        else:
            raise AssertionError("read through /proc: " + path)
    assert Path(__file__).read_text()  # its own copy, in its own run's folder
    assert Path({problem!r}).read_text()  # the problem's folder stays readable
    def kernel(x):
        return x * 2 + 1
"""


def private_mounts_work() -> bool:
    """Whether a process here can enter a mount namespace of its own and mount in it."""
    probe = ("from krung.worker.guard import private_mounts, hide; import tempfile, sys\n"
             "with tempfile.TemporaryDirectory() as folder:\n"
             "    sys.exit(private_mounts() is not None or not hide([folder], []))")
    return subprocess.run([sys.executable, "-c", probe]).returncode == 0


@needs_landlock
def test_a_version_cannot_read_other_runs_or_the_database(krung, scale_problem, version, store):
    """Landlock governs writes; the worker's own mount namespace (a user namespace, no root)
    hides the store's folder, its own run's folder mounted back."""
    first = krung("run", scale_problem, version("first", "def kernel(x):\n    return x * 2 + 1"
                                                          "\n"), "--json", "--rungs", "static")
    other = store.parent / "runs" / run_json(first)["run_id"]
    hidden = [str(p) for p in other.rglob("*") if p.is_file()] + [str(store)]
    assert len(hidden) > 2, hidden
    beside = scale_problem / "notes.txt"  # a data file beside the problem
    beside.write_text(f"notes {random.random()}")
    source = textwrap.dedent(READS).format(hidden=hidden, problem=str(beside))
    result = krung("run", scale_problem, version("reads", source), "--json", "--rungs", RUNGS)
    sandbox = run_json(result)["env"].get("sandbox")
    assert sandbox, result.stdout + result.stderr
    if "store" in sandbox:
        pytest.skip(f"this machine cannot hide the store: {sandbox['store']}")
    assert result.code == 0, result.stdout + result.stderr
    assert sandbox["hidden"] == [str(store.parent)], sandbox
    assert other.is_dir() and store.exists()  # hidden from the version alone


CONNECTS = """
    import socket
    socket.create_connection(("127.0.0.1", {port}), timeout=5).sendall(b"outputs")
    def kernel(x):
        return x * 2 + 1
"""


@pytest.mark.skipif(ABI < 4, reason="Landlock below ABI 4 (or none) cannot refuse TCP")
def test_a_version_cannot_connect_over_tcp(krung, scale_problem, version):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.1)
        port = listener.getsockname()[1]
        source = textwrap.dedent(CONNECTS).format(port=port)
        result = krung("run", scale_problem, version("connects", source), "--json",
                       "--rungs", RUNGS)
        with pytest.raises(TimeoutError):
            listener.accept()
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("compile", "PermissionError"), failed


SECCOMP = sys.platform == "linux" and os.uname().machine in ("x86_64", "aarch64")
needs_seccomp = pytest.mark.skipif(not SECCOMP, reason="krung's seccomp filter is for Linux on "
                                   "x86-64 or aarch64 only: elsewhere IP sockets stay open")

# Checks the filter in a process of its own: a thread started before it (as torch's are)
# and the main thread both lose IP sockets, unix sockets stay, io_uring cannot be set up
# (without the filter, the null parameters make it EFAULT).
FILTERED = """
import ctypes, json, os, socket, sys, threading
from krung.worker.seccomp import deny_ip_sockets

go, seen = threading.Event(), {}
def early():
    go.wait()
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
        seen["thread"] = "opened"
    except PermissionError:
        seen["thread"] = "PermissionError"
thread = threading.Thread(target=early)
thread.start()
applied = deny_ip_sockets()
go.set()
thread.join()
if applied["ip_sockets"] == "denied":
    for name, family, kind in [("udp", socket.AF_INET, socket.SOCK_DGRAM),
                               ("tcp6", socket.AF_INET6, socket.SOCK_STREAM)]:
        try:
            socket.socket(family, kind).close()
            seen[name] = "opened"
        except PermissionError:
            seen[name] = "PermissionError"
    left, right = socket.socketpair()
    left.sendall(b"unix")
    seen["socketpair"] = right.recv(4).decode()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(ctypes.c_long(425), ctypes.c_long(8), None) < 0:
        seen["io_uring_setup"] = os.strerror(ctypes.get_errno())
print(json.dumps({"applied": applied, "seen": seen}))
"""


def _filtered() -> dict:
    """FILTERED's report, from a process of its own."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", FILTERED], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    if report["applied"]["ip_sockets"] != "denied":
        pytest.skip(f"this kernel refused the seccomp filter: {report['applied']}")
    return report


@needs_seccomp
def test_the_seccomp_filter_denies_ip_sockets_to_every_thread():
    report = _filtered()
    assert report["seen"] == {"thread": "PermissionError", "udp": "PermissionError",
                              "tcp6": "PermissionError", "socketpair": "unix",
                              "io_uring_setup": os.strerror(1)}, report


# Sends a UDP datagram to the test's socket, at import or in its kernel.
SENDS_UDP = """
    import socket
    def send():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.sendto(b"outputs", ("127.0.0.1", {port}))
    if {at_import}:
        send()
    def kernel(x):
        send()
        return x * 2 + 1
"""


@needs_seccomp
@pytest.mark.parametrize(("at_import", "rung"), [(True, "compile"), (False, "run")],
                         ids=["import", "kernel"])
def test_a_version_cannot_send_udp(krung, scale_problem, version, at_import, rung):
    _filtered()  # skips where the kernel refuses the filter
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.1)
        source = textwrap.dedent(SENDS_UDP).format(port=listener.getsockname()[1],
                                                   at_import=at_import)
        result = krung("run", scale_problem, version("sends_udp", source), "--json",
                       "--rungs", RUNGS)
        with pytest.raises(TimeoutError):
            listener.recvfrom(64)
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == (rung, "PermissionError"), failed
    if not at_import:  # a version that failed its import has no env.sandbox to show
        sandbox = run_json(result)["env"]["sandbox"]
        assert sandbox["network"] == ("no TCP, no IP sockets" if ABI >= 4 else "no IP sockets")


# Talks to itself over a unix socketpair in its kernel (as a library's helper process might).
SOCKETPAIR = """
    import socket
    import torch
    def kernel(x):
        left, right = socket.socketpair()
        sent = x.contiguous().view(torch.uint8).numpy().tobytes()
        data = b""
        with left, right:  # a piece at a time: a whole bench-sized input fills the buffer
            for start in range(0, len(sent), 1 << 15):
                left.sendall(sent[start:start + (1 << 15)])
                while len(data) < min(len(sent), start + (1 << 15)):
                    data += right.recv(1 << 16)
        y = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(x.dtype).reshape(x.shape)
        return y * 2 + 1
"""


@needs_seccomp
def test_an_honest_version_may_use_a_unix_socketpair(krung, scale_problem, version):
    result = krung("run", scale_problem, version("socketpair", textwrap.dedent(SOCKETPAIR)),
                   "--json", "--rungs", "static,compile,run,correctness")
    assert result.code == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert run_json(result)["env"]["sandbox"]["ip_sockets"] == "denied"


PLANTED = "krung_sandbox_planted"
INSTALLS = """
    import subprocess, sys
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                           {wheel!r}], capture_output=True, text=True)
    import {module}
    def kernel(x):
        return {module}.twice_plus_one(x)
"""


def _wheel(folder: Path) -> Path:
    """A wheel of one module, made by hand (pip installs it without a network or a build)."""
    path = folder / f"{PLANTED}-0.1-py3-none-any.whl"
    info = f"{PLANTED}-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{PLANTED}.py", "def twice_plus_one(x):\n    return x * 2 + 1\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {PLANTED}\n"
                                           "Version: 0.1\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


@needs_landlock
def test_a_version_cannot_install_a_package(krung, scale_problem, version, tmp_path):
    assert importlib.util.find_spec(PLANTED) is None
    source = textwrap.dedent(INSTALLS).format(wheel=str(_wheel(tmp_path)), module=PLANTED)
    try:
        result = krung("run", scale_problem, version("installs", source), "--json",
                       "--rungs", RUNGS)
        failed = first_failure(result)
        assert (failed["name"], failed["error_type"]) == ("compile", "ModuleNotFoundError"), \
            failed
        assert importlib.util.find_spec(PLANTED) is None
    finally:  # had the walls failed, the shared environment must not keep it
        if importlib.util.find_spec(PLANTED) is not None:
            import subprocess

            subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", PLANTED],
                           check=False)


# Double-forks a sleeper in a session of its own (optionally first turning off the worker's
# subreaper, so the orphan climbs to the judge), which writes its pid to a file 20 times a
# second for a minute (a killed sleeper once left it empty, opened and not yet written); the
# version itself is honest.
ESCAPES = """
    import ctypes, os, time
    beat = os.path.join(os.environ["XDG_CACHE_HOME"], "beat")
    if {clear_subreaper}:
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off
    if os.fork() == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                for _ in range(1200):  # whole, by rename: a kill mid-write leaves no empty beat
                    with open(beat + ".new", "w") as f:
                        f.write(str(os.getpid()))
                    os.replace(beat + ".new", beat)
                    time.sleep(0.05)
        finally:
            os._exit(0)
    for _ in range(3000):  # the import ends once the sleeper runs, however loaded the machine
        if os.path.exists(beat):
            break
        time.sleep(0.01)
    def kernel(x):
        return x * 2 + 1
"""


@pytest.mark.parametrize("clear_subreaper", [False, True], ids=["double_fork", "subreaper_off"])
def test_a_double_forked_sleeper_ends_with_its_run(krung, scale_problem, version, tmp_path,
                                                   clear_subreaper):
    # The version's own cache folder is one it may write to, and the test can read.
    cache = tmp_path / "cache"
    source = textwrap.dedent(ESCAPES).format(clear_subreaper=clear_subreaper)
    result = krung("run", scale_problem, version("escapes", source), "--json", "--rungs", RUNGS,
                   env={"XDG_CACHE_HOME": str(cache)})
    assert result.code == 0, result.stdout + result.stderr
    [beat] = (cache / "krung" / "worker" / "versions").glob("*/beat")
    pid = int(beat.read_text())
    time.sleep(0.3)
    before = beat.stat().st_mtime_ns
    time.sleep(0.3)
    assert beat.stat().st_mtime_ns == before, "the sleeper still writes"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("solution", [
    PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py",
    PROBLEMS / "vector_add" / "solutions" / "cuda_inline.py",  # torch's build cache
    PROBLEMS / "vector_add" / "solutions" / "cutedsl.py",  # its dumps in the run's folder
    PROBLEMS / "vector_add" / "solutions" / "tilelang_jit.py",
], ids=lambda p: p.stem)
def test_the_cuda_ladder_runs_inside_the_walls(krung, solution):
    """On the GPU, with the walls asked for (KRUNG_SANDBOX=on; off there by default until this
    has passed on the H200): every rung (ncu's profile and compute-sanitizer too, where installed) for
    versions in the DSLs that write caches or files: Triton's cache, torch's CUDA C++ build
    cache, CuTeDSL's dumps, TileLang's cache; by CUDA IPC. A DSL not installed is skipped."""
    from krung.judge.ladder import RUNGS

    result = krung("run", solution.parent.parent.name, solution, "--json", "--device", "cuda",
                   "--rungs", ",".join(RUNGS), env={"KRUNG_SANITIZE": "1", "KRUNG_SANDBOX": "on"},
                   timeout=1200)
    rungs = rungs_of(result)
    if rungs["compile"].get("error_type") == "DSLNotInstalled":
        pytest.skip(rungs["compile"]["error"])
    assert result.code == 0, json.dumps(rungs, indent=1)[-6000:]
    assert all(r["status"] in ("ok", "skipped") for r in rungs.values()), rungs
    sandbox = run_json(result)["env"]["sandbox"]
    assert sandbox["sandbox"] == ("landlock" if ABI else "none"), sandbox


def test_the_walls_follow_krung_sandbox(krung, scale_problem, version, tmp_path):
    """KRUNG_SANDBOX=off: no walls, the run says why; a write outside the scratch then works
    (the default, cpu, refuses it: test_a_version_cannot_write_to_the_problem_...)."""
    from krung.judge.candidate import raises_walls

    assert raises_walls("cpu", "cpu") and not raises_walls("cpu", "cuda")
    assert raises_walls("on", "cuda") and not raises_walls("off", "cpu")
    target = tmp_path / f"outside-{os.getpid()}.txt"
    writes = (f"from pathlib import Path\nPath({str(target)!r}).write_text('x')\n"
              "def kernel(x):\n    return x * 2 + 1\n")
    result = krung("run", scale_problem, version("writes_outside", writes), "--json",
                   "--rungs", "static,compile", env={"KRUNG_SANDBOX": "off"})
    assert result.code == 0, result.stdout[-3000:]
    assert target.read_text() == "x"
    sandbox = run_json(result)["env"]["sandbox"]
    assert sandbox["sandbox"] == "none" and "KRUNG_SANDBOX" in sandbox["why"], sandbox


# Plants a file, and reads the store's path, only where it is imported outside Triton's
# interpreter: the artifacts rung's build process, on a CPU.
PLANTS_IN_THE_BUILD = """
import os
from pathlib import Path

if os.environ.get("TRITON_INTERPRET") != "1":
    assert "KRUNG_STORE" not in os.environ, "the build process sees the store"
    assert HIDDEN or os.path.exists(STORE)  # where the machine can hide the store, it is
    Path(TARGET).write_text("planted")
""" + TRITON


@needs_landlock
def test_the_artifacts_build_process_is_fenced_as_the_worker_is(krung, scale_problem, version,
                                                                store):
    """The build process imports the version too (not under the interpreter): it gets the
    worker's environment and walls, so a write into the problem folder fails there; and the
    store is hidden from it as from the worker."""
    target = scale_problem / "planted.py"
    hidden = private_mounts_work()
    source = (PLANTS_IN_THE_BUILD.replace("TARGET", repr(str(target)))
              .replace("HIDDEN or os.path.exists(STORE)",
                       f"not os.path.exists({str(store)!r})" if hidden else "True"))
    result = krung("run", scale_problem, version("plants_in_build", source), "--json",
                   "--rungs", "static,compile,run,artifacts")
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("artifacts", "PermissionError"), failed
    assert not target.exists()


# Leaves a child process and a thread spinning after its import: they would compete with the
# reference the judge times, were the worker not stopped meanwhile.
LEAVES_WORK_RUNNING = """
import subprocess
import sys
import threading

child = subprocess.Popen([sys.executable, "-c", "while True: pass"])


def spin():
    while True:
        pass


threading.Thread(target=spin, daemon=True).start()


def kernel(x):
    return x * 2 + 1
"""


def test_the_worker_and_what_it_left_running_are_stopped_while_the_reference_is_timed(
        tmp_path, version):
    """`paused` (around the reference's timing in the benchmark rung) stops the worker and
    every process below it, then lets them go on; CPU time stops meanwhile."""
    from krung.judge.candidate import Candidate, _living_descendants, _stat

    solution = version("leaves_work_running", LEAVES_WORK_RUNNING)
    candidate = Candidate("cpu", tmp_path, solution)
    candidate.start()
    try:
        assert candidate.request({"op": "load", "path": str(solution)}, 120, "load")["ok"]
        pid = candidate.pid
        deadline = time.monotonic() + 30
        while not _living_descendants(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = [pid, *_living_descendants(pid)]
        assert len(tree) >= 2, tree

        def cpu_ticks(p: int) -> int:  # utime + stime, /proc/<pid>/stat fields 14 and 15
            fields = _stat(p)
            return int(fields[11]) + int(fields[12])

        with candidate.paused():
            assert all(_stat(p)[0] == "T" for p in tree), [_stat(p)[:1] for p in tree]
            before = [cpu_ticks(p) for p in tree]
            time.sleep(0.5)
            assert [cpu_ticks(p) for p in tree] == before  # nothing ran
        # SIGCONT reaches each process when the kernel schedules it: wait for that, not a time
        deadline = time.monotonic() + 30
        while any(_stat(p)[0] == "T" for p in tree) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_stat(p)[0] != "T" for p in tree), [_stat(p)[:1] for p in tree]
        x = torch.randn(1000)
        call = candidate.request({"op": "call", "inputs": [x]}, 120, "call")
        assert call["ok"] and torch.equal(call["outputs"][0], x * 2 + 1)
    finally:
        candidate.close()


def test_the_store_folder_is_hidden_whole_unless_the_worker_needs_what_is_beside_it(tmp_path):
    """`.krung/krung.db` (the default): the whole folder. A store in a project's own folder,
    beside the problem: its runs and database files alone."""
    from krung.judge.candidate import hidden_store

    name = f"s{random.randrange(1 << 20)}.db"
    own = tmp_path / ".krung" / "runs" / "r1"
    own.mkdir(parents=True)
    problem = tmp_path / "problem"
    hidden, keep = hidden_store(tmp_path / ".krung" / name, own, [problem])
    assert hidden == [str(tmp_path / ".krung")]
    assert keep == [str(own), str(tmp_path / ".krung" / "build_cache")]
    (tmp_path / name).write_text("db")
    (tmp_path / f"{name}-wal").write_text("wal")
    hidden, _ = hidden_store(tmp_path / name, tmp_path / "runs" / "r2", [problem])
    assert hidden == [str(tmp_path / "runs"), str(tmp_path / name), str(tmp_path / f"{name}-wal")]
