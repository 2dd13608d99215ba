"""The Ray executor: each evaluation a Ray task on an existing cluster (`krung[ray]`).

A task gets the packed job (krung.host.scale.job), evaluates it in a temporary directory on
whichever node Ray picks, with one GPU reserved for it when the job runs on CUDA (device
cuda, or auto on a cluster with GPUs), and returns
the run, which the caller imports into its store. Nodes need krung's dependencies (torch,
Triton); on a cluster (`address` given) Ray ships krung's own package to them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import krung
from krung.host.scale import Job, Outcome, Running
from krung.host.scale.job import error_record, outcome_of, pack, run_packed, unpack
from krung.protocol.errors import KrungError, UsageError
from krung.protocol.settings import Settings


def evaluate_packed(payload: bytes) -> dict[str, Any]:
    """The task body: unpack, evaluate, return the run (runs on a Ray worker)."""
    import sys

    with tempfile.TemporaryDirectory(prefix="krung-ray-") as scratch:
        workdir = Path(scratch)
        unpack(payload, workdir)
        sys.path.insert(0, str(workdir / "src"))
        try:
            return run_packed(workdir)
        except KrungError as exc:  # a broken problem: the caller rebuilds the same error
            return error_record(exc)


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, num_gpus: float | None = None):
        try:
            import ray
        except ImportError:
            raise UsageError("the ray executor needs Ray",
                             hint="pip install 'krung[ray]'") from None
        self.ray = ray
        self.address = address
        self.num_gpus = num_gpus
        if not ray.is_initialized():
            ray.init(address=address, ignore_reinit_error=True, include_dashboard=False,
                     log_to_driver=False)
        self.slots = int(ray.cluster_resources().get("CPU", 1))

    def running(self) -> list[Running]:
        return []  # not told: the evaluations run elsewhere

    def map(self, jobs: list[Job], settings: Settings) -> Iterator[Outcome]:
        task = self.ray.remote(evaluate_packed)
        extra: dict[str, Any] = {}
        if self.address:  # other machines: Ray ships the krung package to their workers
            extra["runtime_env"] = {"py_modules": [str(Path(krung.__file__).resolve().parent)]}
        # "auto" runs on CUDA wherever the cluster has GPUs: reserve one, or every task
        # would see the node's first GPU and benchmark on it at once
        has_gpus = bool(self.ray.cluster_resources().get("GPU"))
        futures = {}
        for job in jobs:
            try:
                payload = pack(job, settings)
            except KrungError as exc:
                yield Outcome(job, error=f"{type(exc).__name__}: {exc.message}", hint=exc.hint)
                continue
            device = job.device or settings.device
            gpus = self.num_gpus if self.num_gpus is not None else (
                1 if device == "cuda" or (device == "auto" and has_gpus) else 0)
            futures[task.options(num_gpus=gpus, num_cpus=1, **extra).remote(payload)] = job
        where = f"ray:{self.address or 'local'}"
        while futures:
            done, _ = self.ray.wait(list(futures), num_returns=1)
            job = futures.pop(done[0])
            try:
                result = self.ray.get(done[0])
            except Exception as exc:  # the task died (its node, or the evaluation itself)
                yield Outcome(job, error=f"RayTaskFailed: {exc}",
                              hint="read the Ray worker's log for why the task ended")
                continue
            yield outcome_of(result, job, settings, where=where)
