"""Shared fixtures: a private store per test, the real `krung` command in a subprocess, and
small problems and versions written to a temporary directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = REPO / "problems"
# Problems of our own in the two public formats, with right and wrong solutions.
KERNELBENCH = REPO / "tests" / "data" / "kernelbench"
GPUMODE = REPO / "tests" / "data" / "gpumode"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_configure(config):
    """Under xdist, each test process's evaluations take their share of the cores for torch's
    threads, as a batch's slots do (krung.host.scale.local.cpu_share): with torch's default
    of a thread per core, every elementwise pass in a judge or worker waits for a thread the
    other test processes' work has descheduled (the suite took a third longer on 2 cores)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    from krung.host.scale.local import cpu_share

    threads = cpu_share(workers)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)


@pytest.fixture(scope="session", autouse=True)
def judge_forks(tmp_path_factory):
    """One judge fork server per test process (krung.judge.forks): the CPU judges of its
    tests' evaluations are forked from a process that imported torch once, not each started
    (about 1.5 s of CPU apiece, most of a small evaluation). A test of the cold start sets
    KRUNG_JUDGE_FORKS to '' for its evaluation."""
    from krung.judge import forks

    path = tmp_path_factory.mktemp("forks") / "judges.sock"
    server = forks.start(path, os.getpid())
    os.environ["KRUNG_JUDGE_FORKS"] = str(path)
    yield path
    del os.environ["KRUNG_JUDGE_FORKS"]
    server.terminate()
    server.wait()


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


BUDGET_S = 20.0  # a test of `make test` over this is marked `over_budget`, with its reason
OVER_SEEN: list[tuple[str, float]] = []


def pytest_runtest_logreport(report):
    """Note each test of this run over the budget that does not say why it may be (under
    xdist this runs in the controller too, with every worker's reports)."""
    keywords = report.keywords
    if (report.when == "call" and report.duration > BUDGET_S and "slow" not in keywords
            and "over_budget" not in keywords):
        OVER_SEEN.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter):
    if OVER_SEEN and not hasattr(terminalreporter.config, "workerinput"):
        terminalreporter.section(f"over the {BUDGET_S:.0f} s budget of a test")
        for nodeid, seconds in sorted(OVER_SEEN, key=lambda item: -item[1]):
            terminalreporter.write_line(
                f"{seconds:6.1f} s {nodeid}: make it faster, or mark it `slow` (make test-all) "
                f"or `over_budget` with the reason in a comment")


def declared(label: str) -> str:
    """The declared case of a correctness row's label: on a CPU the budget may check a case
    smaller than declared (`n=3 (shrunk from n=129)`), and how much smaller depends on how
    fast the machine is at the time (krung.judge.problem.cpu_budget)."""
    return label.split(" (shrunk from ", 1)[1][:-1] if " (shrunk from " in label else label


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "store" / "krung.db"


def krung_command(store: Path, home: Path):
    """`krung ARGS` in a subprocess with `store` as its store, run in `home` unless told."""

    def run(*args: str, timeout: float = 600, env: dict | None = None,
            cwd: Path | None = None) -> Result:
        environ = dict(os.environ, KRUNG_STORE=str(store), KRUNG_DEVICE="cpu", **(env or {}))
        done = subprocess.run([sys.executable, "-m", "krung", *map(str, args)],
                              capture_output=True, text=True, timeout=timeout, env=environ,
                              cwd=cwd or home)
        return Result(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def krung(store, tmp_path):
    """Run the real `krung` command in a subprocess, with a private store, on the CPU unless
    the test passes --device."""
    return krung_command(store, tmp_path)


class SharedRuns:
    """`krung run PROBLEM VERSION --json` over SCALE_PROBLEM, each version evaluated once per
    test process (a real evaluation is seconds of CPU) and shared by the tests that only read
    what it printed, or its store through `krung`: they assert different things about the
    same evaluation. A test that needs a run of its own (its store, its options) makes it."""

    def __init__(self, home: Path):
        self.home = home
        self.problem = write(home / "scale" / "problem.py", SCALE_PROBLEM).parent
        self.krung = krung_command(home / "store" / "krung.db", home)
        self._runs: dict[str, Result] = {}

    def run(self, name: str, source: str) -> Result:
        path = self.home / "versions" / f"{name}.py"
        if name not in self._runs:
            write(path, source)
            self._runs[name] = self.krung("run", self.problem, path, "--json")
        assert path.read_text() == textwrap.dedent(source).lstrip(), \
            f"two sources under one shared name {name!r}"
        return self._runs[name]


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory) -> SharedRuns:
    return SharedRuns(tmp_path_factory.mktemp("shared_runs"))


def default_sigint() -> None:
    """preexec_fn for a child that must take Ctrl-C: a shell that starts the tests in the
    background ignores SIGINT, the child inherits that, and Python then installs no
    KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def until_rung(store: Path, name: str, timeout: float = 240) -> None:
    """Until the store's newest run has recorded the rung `name`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(store)) as db:
            if db.execute("SELECT 1 FROM rungs WHERE name=? AND run_id=(SELECT run_id FROM "
                          "runs ORDER BY started_at DESC LIMIT 1)", (name,)).fetchone():
                return
        time.sleep(0.1)
    raise AssertionError(f"the {name} rung never came")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


# A small torch-only problem: fast to evaluate, so the harness itself is what is tested.
SCALE_PROBLEM = '''
    """y = 2x + 1 over a 1-D tensor."""
    import torch

    description = "y = 2x + 1"

    def reference(x):
        return x * 2 + 1

    def make_inputs(case, seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(case["n"], generator=g, device=device).to(getattr(torch, case["dtype"])),)

    test_cases = [{"n": 1, "dtype": "float32"}, {"n": 1000, "dtype": "float32"},
                  {"n": 4099, "dtype": "bfloat16"}]
    bench_cases = [{"n": 1 << 20, "dtype": "float32"}]
    cpu_bench_cases = [{"n": 4096, "dtype": "float32"}]

    def flops(case):
        return 2 * case["n"]

    def bytes_moved(case):
        return 8 * case["n"]
'''


# Versions of SCALE_PROBLEM that many tests use: a right one, and one wrong only on the tail
# of its longest case (so it passes the run rung and fails correctness).
GOOD = """
def kernel(x):
    return x * 2 + 1
"""
TAIL_BUG = """
def kernel(x):
    y = x * 2 + 1
    if x.numel() > 1000:
        y[-1] = 0
    return y
"""


@pytest.fixture
def scale_problem(tmp_path) -> Path:
    write(tmp_path / "scale" / "problem.py", SCALE_PROBLEM)
    return tmp_path / "scale"


@pytest.fixture
def version(tmp_path):
    """Write a version file: version("name", source) -> its path."""

    def make(name: str, source: str) -> Path:
        return write(tmp_path / "versions" / f"{name}.py", source)

    return make


# A CUDA C++ version of vector_add with a typo in its kernel (`bb`): the compile rung must
# name the line of the .py file where it sits, on a CPU (nvcc) and on a GPU (torch's build).
BROKEN_CUDA = '''
"""A CUDA C++ version with a typo in its kernel."""
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + bb[i];
}
torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    add_kernel<<<(a.numel() + 127) / 128, 128>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                 out.data_ptr<float>(), a.numel());
    return out;
}
"""


def kernel(a, b):
    ext = load_inline("broken_add", cpp_sources="torch::Tensor vector_add(torch::Tensor a, torch::Tensor b);",
                      cuda_sources=CUDA, functions=["vector_add"])
    return ext.vector_add(a, b)
'''
