"""The forked worker's zygote (krung.worker.zygote) in a process of its own, as the judge's
entry makes it: one whose judge never asks exits, and one that died before it was asked
leaves the judge starting its worker as a new process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO

SCRIPT = """
import os, signal, sys, time
from pathlib import Path
from krung.worker import zygote
from krung.judge.candidate import Candidate

unused = zygote.fork(preload=())
unused.close()  # the judge needs no worker after all
_, status = os.waitpid(unused.pid, 0)
print("unused exited", os.waitstatus_to_exitcode(status))

dead = zygote.fork(preload=())
os.kill(dead.pid, signal.SIGKILL)
time.sleep(0.2)
run_dir = Path(sys.argv[1])
candidate = Candidate("cpu", run_dir, Path("version.py"))
candidate.start(zygote=dead)
print("started as", type(candidate.process).__name__)
print("hello from", candidate.hello(120)["pid"] == candidate.pid)
candidate.close()
"""


def test_a_zygote_left_unused_exits_and_a_dead_one_makes_the_judge_start_its_worker(tmp_path):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["unused exited 0", "started as Popen",
                                        "hello from True"], done.stdout + done.stderr
