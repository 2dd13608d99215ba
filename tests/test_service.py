"""The warm evaluation service: real service processes on a real Unix socket, real judges and
workers, the real `krung` command beside them. Each test has its own store, so its own
service, stopped at the end."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from krung.host import service
from krung.judge import gpu_lock
from krung.protocol import messages
from tests.conftest import GOOD, default_sigint, until_rung, write

QUICK = "static,compile,run"
CRASHES = {
    "exits": "import os\ndef kernel(x):\n    os._exit(0)\n",
    "segfaults": "import ctypes\ndef kernel(x):\n    return ctypes.string_at(0)\n",
    "hangs": "def kernel(x):\n    while True:\n        pass\n",
}
# Prints a line to its log, then sleeps in every call (a slow version, for mid-run events).
SLOW = """
import time
print("slow version loaded", flush=True)
def kernel(x):
    time.sleep({seconds})
    return x * 2 + 1
"""
# The same, slow in its first call only: a run to kill in that call, whose rest is quick.
SLOW_FIRST = """
import time
calls = 0
def kernel(x):
    global calls
    calls += 1
    if calls == 1:
        time.sleep({seconds})
    return x * 2 + 1
"""


@pytest.fixture
def warm(store):
    """A service for the test's store, stopped (with its judges) at the end."""
    store.parent.mkdir(parents=True, exist_ok=True)
    found = service.start(store)
    yield found
    service.stop(store)
    _gone(found["pid"], 10)


def _env(store: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, KRUNG_STORE=str(store), KRUNG_DEVICE="cpu", **extra)


def _ready(store: Path, timeout: float = 240) -> dict:
    """The service's status once a judge of each kind it knows is warm (before the first
    evaluation it knows none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = service.status(store)
        if found and all(p["ready"] for p in found["pools"]):
            return found
        time.sleep(0.2)
    raise AssertionError(f"no judge got ready: {service.status(store)}")


def _alive(pid: int) -> bool:
    """Running, neither gone nor a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _gone(pid: int, within: float) -> float | None:
    """Seconds until `pid` is gone, or None if it is still there after `within`."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        if not _alive(pid):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def _latest_env(store: Path) -> dict:
    """The newest run's env as the store holds it now (the run may be in progress)."""
    with sqlite3.connect(store) as db:
        row = db.execute("SELECT env FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def _until_running(store: Path, process: subprocess.Popen, timeout: float = 240) -> dict:
    """The env of the run `process` has under way, once its judge and worker are known."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        with contextlib.suppress(sqlite3.Error):
            env = _latest_env(store)
            if env.get("worker_pid") and env.get("judge_pid"):
                return env
        time.sleep(0.1)
    raise AssertionError("the run never started")


def _krung(store: Path, *args: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "krung", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(store, **extra), preexec_fn=default_sigint)


@pytest.mark.over_budget  # four versions in turn, each waiting for a warm judge
def test_a_crash_or_hang_in_a_pooled_worker_leaves_the_next_version_alone(
        krung, warm, store, scale_problem, version):
    """Each version gets a judge and a worker of its own from the pool; what one does to its
    processes (os._exit, a segfault, an endless loop) is its own failed rung, and the next
    version passes in fresh ones. The worker had Triton imported in advance, and a version
    without Triton is still told apart (no interpreter mode)."""
    workers = set()
    for name, source in CRASHES.items():
        _ready(store)
        # The endless loop's limit is short, the others' long enough for a loaded machine.
        result = krung("run", scale_problem, version(name, source), "--rungs", QUICK,
                       "--compile-timeout", "1" if name == "hangs" else "4", "--json")
        run = result.json()
        assert result.code == 1, result.stderr
        assert run["env"]["judge"] == "service"
        failed = next(r for r in run["rungs"] if r["status"] == "failed")
        assert failed["error_type"] == ("Timeout" if name == "hangs" else "WorkerCrashed")
        workers.add(run["env"]["worker_pid"])
    _ready(store)
    good = krung("run", scale_problem, version("good", GOOD), "--rungs",
                 "static,compile,run,correctness", "--json")
    assert good.code == 0, good.stderr
    run = good.json()
    assert run["env"]["judge"] == "service" and run["env"]["worker_pid"] not in workers
    assert "mode" not in run["rungs"][1]["figures"]  # torch only: not the Triton interpreter
    assert service.status(store)["served"] == 4


def test_a_triton_version_through_the_service_keeps_its_logs_and_figures(
        krung, warm, store, tmp_path):
    """The built-in softmax's Triton version, warm: it passes, it is told it ran under the
    interpreter, and the logs its judge and worker started in the service's folder are in
    the run's folder, the version's prints included."""
    solution = write(tmp_path / "v" / "triton_says.py",
                     "print('hello from the version', flush=True)\n"
                     + (Path(__file__).parent.parent / "problems/softmax/solutions/"
                        "triton_rowwise.py").read_text())
    _ready(store)
    result = krung("run", "softmax", solution, "--rungs", "static,compile,run", "--json")
    assert result.code == 0, result.stderr
    run = result.json()
    assert run["env"]["judge"] == "service"
    assert run["rungs"][1]["figures"]["mode"] == "triton-interpreter"
    assert run["rungs"][1]["figures"]["import_s"] < 1.0  # Triton was imported in advance
    folder = store.parent / "runs" / run["run_id"]
    assert "hello from the version" in (folder / "worker.log").read_text()
    assert (folder / "judge.log").is_file()
    left = {p.name for p in (store.parent / service.FOLDER).glob("*-*.log")}
    assert len(left) <= 2  # only the next pooled judge's and worker's logs


def test_two_clients_at_once_get_a_judge_each(warm, store, scale_problem, version):
    slow = version("slow", SLOW.format(seconds=0.3))
    _ready(store)
    clients = [_krung(store, "run", scale_problem, slow, "--rungs", QUICK, "--json")
               for _ in range(2)]
    runs = []
    for client in clients:
        out, err = client.communicate(timeout=600)
        assert client.returncode == 0, err
        runs.append(json.loads(out))
    assert all(r["env"]["judge"] == "service" for r in runs)
    assert runs[0]["env"]["judge_pid"] != runs[1]["env"]["judge_pid"]
    assert runs[0]["env"]["worker_pid"] != runs[1]["env"]["worker_pid"]


def test_a_service_killed_mid_run_loses_nothing_and_leaves_a_stale_socket(
        krung, warm, store, scale_problem, version):
    """The judge's channel was handed to the client, so the run goes on to the end when the
    service is killed under it. The socket the dead service left is stale: found out,
    removed, and a new service starts on the store."""
    slow = version("slow", SLOW_FIRST.format(seconds=1.5))
    _ready(store)
    client = _krung(store, "run", scale_problem, slow, "--rungs", QUICK + ",correctness",
                    "--json")
    env = _until_running(store, client)
    assert env["judge"] == "service"
    os.kill(warm["pid"], signal.SIGKILL)
    assert _gone(warm["pid"], 10) is not None
    out, err = client.communicate(timeout=600)
    assert client.returncode == 0, err
    run = json.loads(out)
    assert run["ok"] and run["env"]["judge"] == "service"
    assert run["env"]["judge_pid"] == env["judge_pid"]

    sock = store.parent / service.SOCKET
    assert sock.exists()  # left behind by the killed service
    assert krung("service", "status").code == 1
    assert not sock.exists()
    restarted = service.start(store)
    assert restarted["pid"] != warm["pid"]
    service.stop(store)


def test_a_judge_killed_mid_run_is_tried_again_in_fresh_processes(
        warm, store, scale_problem, version):
    """When the service goes down with its judges (its process group killed, say), the
    evaluation runs once more in a cold judge; the first try's end and what it had done are
    kept in the run's env, and its log beside the second's."""
    slow = version("slow", SLOW_FIRST.format(seconds=1.5))
    _ready(store)
    client = _krung(store, "run", scale_problem, slow, "--rungs", QUICK + ",correctness",
                    "--json")
    env = _until_running(store, client)
    assert env["judge"] == "service"
    until_rung(store, "static")
    os.kill(warm["pid"], signal.SIGKILL)
    os.killpg(env["judge_pid"], signal.SIGKILL)
    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err
    run = json.loads(out)
    first = run["env"]["first_try"]
    assert "the judge process" in first["error"] and "before the evaluation ended" in first["error"]
    assert first["rungs_done"][:1] == ["static"]  # what was done is kept
    assert run["outcome"] == "passed" and run["env"]["judge"] == "cold"
    assert run["env"]["judge_pid"] != env["judge_pid"]
    assert _gone(env["worker_pid"], 5) is not None
    with sqlite3.connect(store) as db:
        state, rungs = db.execute("SELECT state, (SELECT count(*) FROM rungs WHERE run_id=?) "
                                  "FROM runs WHERE run_id=?",
                                  (run["run_id"], run["run_id"])).fetchone()
    assert state == "done" and rungs == 4


@pytest.mark.parametrize("how, via", [(signal.SIGINT, "cold"), (signal.SIGTERM, "forked"),
                                      (signal.SIGINT, "service")])
def test_ctrl_c_ends_judge_and_worker_within_2_s_and_records_the_run_interrupted(
        store, scale_problem, version, how, via):
    hang = version("hang", "def kernel(x):\n    while True:\n        pass\n")
    if via == "service":
        store.parent.mkdir(parents=True, exist_ok=True)
        service.start(store)
        _ready(store)
    try:
        client = _krung(store, "run", scale_problem, hang, "--rungs", QUICK,
                        "--compile-timeout", "600", "--timeout", "600",
                        **({"KRUNG_JUDGE_FORKS": ""} if via == "cold" else {}))
        env = _until_running(store, client)
        assert env["judge"] == via
        until_rung(store, "static")
        time.sleep(1.0)  # inside the endless first call
        os.kill(client.pid, how)
        judge_s, worker_s = _gone(env["judge_pid"], 5), _gone(env["worker_pid"], 5)
        stdout, stderr = client.communicate(timeout=10)
        code = client.returncode
    finally:
        service.stop(store)
    assert judge_s is not None and judge_s < 2.0, judge_s
    assert worker_s is not None and worker_s < 2.0, worker_s
    assert code == 130, stderr
    with sqlite3.connect(store) as db:
        state, error = db.execute("SELECT state, error FROM runs").fetchone()
        rungs = [r[0] for r in db.execute("SELECT name FROM rungs ORDER BY position")]
    assert state == "broken"
    assert "interrupted" in error and "compile" in error, error
    assert rungs == ["static"]  # the rung finished before the interruption is kept
    assert "STOPPED (no verdict)  run " in stdout and error in stdout, stdout  # and printed


def test_a_stale_socket_is_removed_and_a_starting_service_is_left_alone(store, tmp_path):
    store.parent.mkdir(parents=True, exist_ok=True)
    sock_path, lock_path, _ = service.paths(store)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock_path))  # a socket file nobody listens on, as a killed service leaves
    stale.close()
    holder = os.open(lock_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # as a service that is starting holds it
    assert service.status(store) is None
    assert sock_path.exists()  # not removed under a service that is starting
    os.close(holder)
    assert service.status(store) is None
    assert not sock_path.exists()


def test_one_service_per_store_and_a_deep_store_folder(tmp_path):
    """A second service on a store refuses to start; a store folder too deep for a Unix
    socket's name still gets its service."""
    deep = tmp_path.joinpath(*["deep-folder-name"] * 6) / "krung.db"
    deep.parent.mkdir(parents=True)
    assert len(str(deep.parent / service.SOCKET)) > 108
    found = service.start(deep)
    try:
        second = subprocess.run([sys.executable, "-m", "krung.host.service", "--store",
                                 str(deep)], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and "already runs" in second.stdout
        assert service.status(deep)["pid"] == found["pid"]
    finally:
        assert service.stop(deep)
    assert _gone(found["pid"], 10) is not None
    assert service.status(deep) is None


def test_a_caller_with_other_code_stops_the_service_and_is_served_cold(warm, store):
    spec = service.JudgeSpec.of(service.Settings(device="cpu"), {})
    reply = service._ask(store, messages.Acquire(spec.key(), spec.to_json(), "another krung"))
    assert isinstance(reply, messages.Refused) and "older krung code" in reply.why
    assert _gone(warm["pid"], 10) is not None


def test_the_service_ends_with_its_owner_and_when_idle(store, tmp_path):
    store.parent.mkdir(parents=True, exist_ok=True)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    found = service.start(store, owner=owner.pid)
    owner.kill()
    owner.wait()
    assert _gone(found["pid"], 10) is not None
    found = service.start(store, idle_s=1.0)
    assert _gone(found["pid"], 15) is not None
    assert "idle for 1 s" in (store.parent / service.FOLDER / "service.log").read_text()


def test_batch_uses_a_service_for_its_length(krung, store, scale_problem, version):
    """(On a machine with cores to spare it starts one by itself; here it is asked to.)"""
    versions = [version(f"good{i}", GOOD) for i in range(3)]
    result = krung("batch", scale_problem, *versions, "--rungs", QUICK, "--json",
                   env={"KRUNG_SERVICE": "on"})
    assert result.code == 0, result.stderr
    runs = [o["run"] for o in result.json()["outcomes"]]
    assert all(r["ok"] for r in runs)
    assert sum(r["env"]["judge"] == "service" for r in runs) == 3
    assert service.status(store) is None  # stopped with the batch


def test_the_judge_speaks_every_few_seconds_while_a_rung_runs(store, scale_problem, version):
    """A call that takes 3 s, heartbeats every 0.5 s (KRUNG_HEARTBEAT; 5 s by default): the
    correctness rung is heard from while it lasts, the case it is on and the time since it
    began, and never silent for as long as the call."""
    import krung

    slow = version("slow3", "import time\nslept = False\ndef kernel(x):\n    global slept\n"
                            "    if x.numel() == 1000 and not slept:\n        slept = True\n"
                            "        time.sleep(3)\n    return x * 2 + 1\n")
    heard: list[tuple[float, str, str]] = []
    start = time.monotonic()
    run = krung.evaluate(scale_problem, slow, rungs="static,compile,run,correctness",
                         settings=krung.Settings.from_env().replace(heartbeat_s=0.5),
                         device="cpu", store=store, on_progress=lambda rung, message: heard.append(
                             (time.monotonic() - start, rung, message)))
    assert run.ok, [r.line() for r in run.rungs]
    beats = [h for h in heard if " n=1000," in h[2] and h[2].endswith(" s)")]
    assert len(beats) >= 3, heard
    times = [h[0] for h in heard]
    assert times[0] < 10  # the judge's start
    assert max(b - a for a, b in itertools.pairwise(times)) < 2.5, heard


def test_the_gpu_lock_is_exclusive_across_processes(tmp_path):
    """Two processes want one GPU's lock: the second waits (and says so) until the first
    lets go; a holder that dies lets go too."""
    path = gpu_lock.lock_path({"device_uuid": f"GPU-test-{os.getpid()}-{time.time_ns()}"})
    hold = ("import sys, time\nfrom pathlib import Path\nfrom krung.judge import gpu_lock\n"
            "with gpu_lock.exclusive(Path(sys.argv[1]), lambda: print('waited', flush=True)):\n"
            "    print('holding', time.time(), flush=True)\n"
            "    time.sleep(float(sys.argv[2]))\n"
            "    print('releasing', time.time(), flush=True)\n")
    try:
        with subprocess.Popen([sys.executable, "-c", hold, str(path), "1.5"],
                              stdout=subprocess.PIPE, text=True) as first:
            assert first.stdout.readline().startswith("holding")
            second = subprocess.run([sys.executable, "-c", hold, str(path), "0"],
                                    capture_output=True, text=True, timeout=60)
            releasing = float(first.stdout.readline().split()[1])
        lines = second.stdout.splitlines()
        assert lines[0] == "waited"
        assert float(lines[1].split()[1]) >= releasing
        with subprocess.Popen([sys.executable, "-c", hold, str(path), "60"],
                              stdout=subprocess.PIPE, text=True) as killed:
            assert killed.stdout.readline().startswith("holding")
            killed.kill()
        after = subprocess.run([sys.executable, "-c", hold, str(path), "0"],
                               capture_output=True, text=True, timeout=60)
        assert after.stdout.startswith("holding")
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.gpu
def test_two_benchmarks_at_once_on_one_gpu_take_turns(store, scale_problem, version):
    """Two evaluations through one service on one GPU: their benchmark rungs do not overlap
    (each rung's span from when its result came and how long it took), and both pass."""
    import threading

    import krung

    store.parent.mkdir(parents=True, exist_ok=True)
    service.start(store, pool=2)
    spans: dict[int, tuple[float, float]] = {}
    runs = {}

    def evaluate(index: int) -> None:
        def on_result(result) -> None:
            if result.name == "benchmark":
                end = time.monotonic()
                spans[index] = (end - result.duration_s, end)

        runs[index] = krung.evaluate(scale_problem, version(f"good{index}", GOOD),
                                     rungs="static,compile,run,correctness,benchmark",
                                     device="cuda", store=store, on_result=on_result)

    try:
        threads = [threading.Thread(target=evaluate, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
    finally:
        service.stop(store)
    assert all(runs[i].ok for i in range(2)), [r.line() for i in runs for r in runs[i].rungs]
    (_, first_end), (second_start, _) = sorted(spans.values())
    assert second_start >= first_end - 0.05, spans  # it began once the first had ended


def test_the_judge_reads_versions_without_importing_triton():
    """The profiler's start imports Triton in another thread; the judge's record of the
    environment, made meanwhile, must not touch the half-imported module (issue 20's
    `partially initialized module 'triton'`): it reads the installed version instead."""
    script = ("import sys, types\n"
              "sys.modules['triton'] = types.ModuleType('triton')  # no __version__ yet\n"
              "from krung.judge.serve import environment\n"
              "print(environment('cpu').get('triton'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    import importlib.metadata

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == importlib.metadata.version("triton")
