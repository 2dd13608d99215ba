"""Progress for long work: plain lines where there is no terminal, a bar where there is."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import time

from krung.host.display import PlainProgress
from krung.protocol.results import RungResult, Status
from tests.conftest import GOOD

LINE = re.compile(r"^\[(correctness|benchmark)\] case (\d+)/(\d+) \S+( \((unseen|bench \S+|stress: [^)]+)\))?$")


def wait_for_lines(stream: io.StringIO, count: int, within: float = 10.0) -> None:
    """Until `stream` holds `count` lines: a loaded machine runs the writer's timer late."""
    deadline = time.monotonic() + within
    while len(stream.getvalue().splitlines()) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_plain_progress_writes_at_most_one_line_a_second():
    stream = io.StringIO()
    with PlainProgress(stream, min_interval_s=0.3) as progress:
        progress.update("correctness", "case 1/4 n=1")
        progress.update("correctness", "case 2/4 n=2")  # within the interval: held back
        progress.update("correctness", "case 3/4 n=3")  # replaces it: the latest wins
        assert stream.getvalue() == "[correctness] case 1/4 n=1\n"
        wait_for_lines(stream, 2)  # the interval is up: the held-back line is written
        assert stream.getvalue().splitlines() == ["[correctness] case 1/4 n=1",
                                                  "[correctness] case 3/4 n=3"]
        progress.update("correctness", "case 4/4 n=4")
        progress.rung_done(RungResult("correctness", Status.OK))  # finished: never written
        time.sleep(0.5)
        progress.update("benchmark", "case 1/1 n=9")
    assert stream.getvalue().splitlines() == ["[correctness] case 1/4 n=1",
                                              "[correctness] case 3/4 n=3",
                                              "[benchmark] case 1/1 n=9"]


def test_run_writes_progress_lines_on_stderr_when_not_a_terminal(krung, scale_problem, version,
                                                                 shared_runs):
    result = krung("run", scale_problem, version("good", GOOD))
    assert result.code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines, "no progress at all"
    # 3 declared cases, the unseen ones krung adds (1 or 2), on a CPU the bench shape, and the
    # value stresses that apply (4 or 5)
    assert re.fullmatch(r"\[correctness\] case 1/(9|1[0-3]) n=1,dtype=float32", lines[0]), lines[0]
    # The rest came within a second of it, and their rungs finished before the second was up.
    assert all(LINE.match(line) for line in lines), lines
    assert not any(line.startswith("[correctness] case") for line in result.stdout.splitlines())
    quiet = shared_runs.run("good", GOOD)
    assert quiet.stderr == ""  # --json: nothing but the object


def on_a_terminal(args, store, cwd) -> tuple[int, str]:
    """Run `krung ARGS` with a pseudo-terminal as its stdin, stdout and stderr; return its
    exit status and everything it drew."""
    leader, follower = pty.openpty()
    env = dict(os.environ, KRUNG_STORE=str(store), KRUNG_DEVICE="cpu", TERM="xterm",
               COLUMNS="160")
    process = subprocess.Popen([sys.executable, "-m", "krung", *map(str, args)],
                               stdin=follower, stdout=follower, stderr=follower, env=env,
                               cwd=cwd)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return process.wait(60), b"".join(chunks).decode(errors="replace")


def test_run_draws_a_progress_bar_on_a_terminal(scale_problem, version, store, tmp_path):
    code, screen = on_a_terminal(["run", scale_problem, version("good", GOOD)], store, tmp_path)
    assert code == 0, screen
    assert "\x1b[" in screen  # drawn in place, with escape codes
    before = screen.split("[static] ok")[0]  # the bar names the rung under way, then the next
    assert "[static]" in before and "[compile]" in before
    assert "[correctness] n=1,dtype=float32" in screen and re.search(r"case 1/(9|1[0-3])", screen)
    assert "OK  run " in screen


def test_watch_draws_live_on_a_terminal(scale_problem, version, store, tmp_path):
    args = ["watch", scale_problem, version("good", GOOD), "--rungs", "static,compile",
            "--max-runs", "1"]
    code, screen = on_a_terminal(args, store, tmp_path)
    assert code == 0, screen
    assert "\x1b[" in screen
    assert "[static] ok  dsl=torch" in screen and "[compile] ok" in screen
    assert "OK  run " in screen and "stopped watching" in screen
