"""The SSH executor: evaluations on a remote host (a cloud machine with a GPU, say).

Each job is one SSH session: the packed job (krung.host.scale.job: the problem, the version and
krung's own sources) goes in on stdin, is unpacked into a fresh temporary directory there,
evaluated by the remote Python (which needs torch, and Triton for Triton versions), and the run
comes back on stdout as JSON, to be imported into the local store; the directory is removed.
Nothing is installed on the remote host.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from krung.host.scale import Job, Outcome, Running
from krung.host.scale.job import outcome_of, pack
from krung.protocol.errors import KrungError, UsageError
from krung.protocol.settings import Settings

# Runs on the remote host: unpack stdin into a fresh directory, evaluate, clean up.
_REMOTE = ("d=$(mktemp -d) && trap 'rm -rf \"$d\"' EXIT && tar xzf - -C \"$d\" && "
           "PYTHONPATH=\"$d/src\" {python} -m krung.host.scale.job \"$d\"")


class SSHExecutor:
    name = "ssh"

    def __init__(self, remote: str, python: str = "python3", ssh_options: list[str] | None = None,
                 workers: int = 1, timeout_s: float = 3600.0):
        if not remote:
            raise UsageError("the ssh executor needs a host", hint="--remote user@host")
        self.remote = remote
        self.python = python
        self.ssh_options = list(ssh_options or [])
        self.slots = workers
        self.timeout_s = timeout_s

    def running(self) -> list[Running]:
        return []  # not told: the evaluations run elsewhere

    def map(self, jobs: list[Job], settings: Settings) -> Iterator[Outcome]:
        with ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="krung-ssh") as pool:
            pending: set[Future[Outcome]] = {pool.submit(self.run_one, job, settings)
                                             for job in jobs}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()

    def run_one(self, job: Job, settings: Settings) -> Outcome:
        try:
            payload = pack(job, settings)
        except KrungError as exc:
            return Outcome(job, error=f"{type(exc).__name__}: {exc.message}", hint=exc.hint)
        command = ["ssh", *self.ssh_options, "-o", "BatchMode=yes", self.remote,
                   _REMOTE.format(python=shlex.quote(self.python))]
        try:
            done = subprocess.run(command, input=payload, capture_output=True,
                                  timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            return Outcome(job, error=f"Timeout: the remote evaluation on {self.remote} took "
                                      f"more than {self.timeout_s:g} s",
                           hint="raise the limit, or look at the remote host's load")
        lines = done.stdout.decode(errors="replace").strip().splitlines()
        result = _last_json(lines)
        if result is None or (done.returncode != 0 and "error" not in result):
            tail = done.stderr.decode(errors="replace").strip()[-2000:]
            return Outcome(job, error=f"RemoteFailed: ssh {self.remote} exited with "
                                      f"{done.returncode}: {tail}",
                           hint="check that `ssh HOST` works without a password and that the "
                                "remote Python has torch (--remote-python to choose it)")
        # a run, or the job's own KrungError (a broken problem) rebuilt as it reads here
        return outcome_of(result, job, settings, where=f"ssh:{self.remote}")


def _last_json(lines: list[str]) -> dict[str, Any] | None:
    """The job's result: the JSON object on its last line of output, if there is one."""
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return result if isinstance(result, dict) else None
