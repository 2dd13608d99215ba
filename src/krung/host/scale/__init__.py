"""Executors: where evaluations run, behind one small interface.

- `local`: evaluations in processes on this machine, one at a time or several at once; with
  `gpus`, each slot is pinned to one GPU with CUDA_VISIBLE_DEVICES (krung.host.scale.local).
- `ray`: each evaluation a Ray task on an existing cluster (krung.host.scale.ray_cluster).
- `ssh`: evaluations on a remote host with a GPU, over SSH (krung.host.scale.remote).

Every evaluation is its own judge and worker, so a crashed one is replaced by the next job's
fresh processes and is itself recorded as a failed run, never lost. Results land in the
caller's store: local executors write there directly; remote ones send the whole run back
(krung.host.scale.job), and it is imported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from krung.protocol.errors import UsageError
from krung.protocol.results import Run
from krung.protocol.settings import Settings


@dataclass(frozen=True)
class Job:
    problem: str  # a problem directory or a built-in name
    solution: str  # the version's file
    rungs: str | None = None
    device: str | None = None
    seed: int | None = None
    precision: str | None = None  # KernelBench problems: fp32, fp16 or bf16


@dataclass
class Running:
    """A job at work: since when (monotonic) and where its judge last said it was."""

    job: Job
    since: float
    at: str = "starting"


@dataclass
class Outcome:
    """What became of one job: its run, or why there is none (a bad version path, say)."""

    job: Job
    run: Run | None = None
    error: str | None = None
    hint: str | None = None


class Executor(Protocol):
    name: str
    slots: int  # evaluations it runs at once

    def map(self, jobs: list[Job], settings: Settings) -> Iterator[Outcome]:
        """Run the jobs, yielding each outcome as it completes, recorded in settings.store."""
        ...

    def running(self) -> list[Running]:
        """The jobs at work now (from any thread), for a line every so often; [] where the
        executor cannot tell."""
        ...


def make_executor(name: str, **options: Any) -> Executor:
    if name == "local":
        from krung.host.scale.local import LocalExecutor

        return LocalExecutor(**options)
    if name == "ray":
        from krung.host.scale.ray_cluster import RayExecutor

        return RayExecutor(**options)
    if name == "ssh":
        from krung.host.scale.remote import SSHExecutor

        return SSHExecutor(**options)
    raise UsageError(f"no executor {name!r}", hint="choose local, ray or ssh")
