"""`krung watch`: the real command in a subprocess, its version file rewritten under it."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import GOOD, TAIL_BUG, default_sigint

QUICK = "static,compile,run,correctness"


class Watcher:
    """`krung watch` in a subprocess, its stdout read line by line as it comes."""

    def __init__(self, args, store, cwd):
        env = dict(os.environ, KRUNG_STORE=str(store), KRUNG_DEVICE="cpu",
                   PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen([sys.executable, "-m", "krung", "watch", *map(str, args)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env, cwd=cwd,
                                        preexec_fn=default_sigint)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def until(self, predicate, timeout=120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError("no such line; output so far:\n" + "\n".join(self.seen))

    def finish(self, timeout=60.0) -> tuple[int, str]:
        code = self.process.wait(timeout)
        self.reader.join(10)
        stderr = self.process.stderr.read()
        self.close()
        return code, stderr

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.reader.join(10)
        self.process.stdout.close()
        self.process.stderr.close()


@pytest.fixture
def watch(store, tmp_path):
    """Start `krung watch ARGS`; whatever happens in the test, it is ended afterwards."""
    started = []

    def start(*args) -> Watcher:
        started.append(Watcher(args, store, tmp_path))
        return started[-1]

    yield start
    for watcher in started:
        watcher.close()


def verdict(line: str) -> bool:
    return line.startswith(("OK  run ", "FAILED  run ", "ERROR (krung failed"))


def test_watch_reruns_when_the_version_is_saved(watch, scale_problem, version):
    path = version("watched", GOOD)
    watcher = watch(scale_problem, path, "--rungs", QUICK, "--max-runs", "2")
    first = watcher.until(verdict)
    assert first.startswith("OK  run "), watcher.seen
    watcher.until(lambda line: line.startswith("watching "))
    path.write_text(TAIL_BUG.lstrip())  # a save that breaks the version
    second = watcher.until(verdict)
    assert second.startswith("FAILED  run ") and "correctness failed" in second
    code, stderr = watcher.finish()
    assert code == 1, stderr
    assert sum(line.startswith("--- run ") for line in watcher.seen) == 2
    assert any(line.startswith("[correctness] FAILED  Mismatch:") for line in watcher.seen)
    assert watcher.seen[1].startswith("device: cpu")


def test_ctrl_c_ends_a_watch_cleanly(watch, scale_problem, version):
    path = version("watched", GOOD)
    watcher = watch(scale_problem, path, "--rungs", "static")
    watcher.until(lambda line: line.startswith("watching "))
    watcher.process.send_signal(signal.SIGINT)
    code, stderr = watcher.finish(timeout=30)
    assert code == 0, stderr
    assert "stopped watching" in stderr
    assert "Traceback" not in stderr


def test_watch_goes_on_when_the_file_is_missing_for_a_while(watch, scale_problem, tmp_path):
    path = tmp_path / "later.py"
    watcher = watch(scale_problem, path, "--rungs", "static", "--max-runs", "2")
    assert watcher.until(lambda line: line.startswith("UsageError: no version file at"))
    watcher.until(lambda line: line.startswith("watching "))
    path.write_text(GOOD.lstrip())
    assert watcher.until(verdict).startswith("OK  run ")
    code, _ = watcher.finish()
    assert code == 0


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_max_runs_must_be_positive(krung, scale_problem, version, bad):
    result = krung("watch", scale_problem, version("v", GOOD), "--max-runs", bad)
    assert result.code == 2 and "runs nothing" in result.stderr
