"""The local executor: evaluations on this machine, several at once if asked.

Slots are taken from a queue by threads that each call `krung.evaluate` (each evaluation its
own judge and worker processes, pre-started by the store's warm service, which runs for the
length of the batch where the machine has cores to spare: krung.host.service). With `gpus`, a slot is one GPU: its evaluations see
only that GPU (CUDA_VISIBLE_DEVICES); without GPUs, several slots share the cores out
(OMP_NUM_THREADS, `cpu_share`). Several slots may share a GPU (`per_gpu`, or `workers`
without `gpus`): the rungs that measure take the GPU for themselves (krung.judge.gpu_lock),
so two benchmarks never overlap, and the next versions' start, compile and correctness run
meanwhile. Sharing GPUs whose memory nvidia-smi tells, a job takes any GPU with a free slot
where its problem's device memory fits beside the jobs at work there, and the jobs behind one
that waits for room start meanwhile (krung.host.scale.gpu_memory); one that failed as running
out of memory does (a dead worker included) runs again at the end, alone on a GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from krung.host import service
from krung.host.evaluate import evaluate
from krung.host.scale import Job, Outcome, Running
from krung.host.scale.gpu_memory import (
    GpuMemory,
    declared_needs_mib,
    gpu_memory_mib,
    measured_need_mib,
)
from krung.host.store import opened
from krung.judge.problem import KERNELBENCH, detect_format, find_problem, problem_name
from krung.protocol.errors import KrungError, UsageError
from krung.protocol.settings import Settings


class LocalExecutor:
    name = "local"

    def __init__(self, workers: int = 1, gpus: list[str] | str | None = None, per_gpu: int = 1):
        # one slot per GPU named (twice named is still one GPU: --per-gpu says how many)
        self.gpus = visible_gpus() if gpus == "all" else list(dict.fromkeys(gpus or []))
        if gpus == "all" and not self.gpus:
            raise UsageError("--gpus all found no GPU (nvidia-smi lists none)",
                             hint="run on a machine with NVIDIA GPUs, or use --workers N")
        if workers < 1 or per_gpu < 1:
            raise UsageError("workers and per-GPU slots must be at least 1",
                             hint="e.g. --workers 2, or --gpus 0,1 --per-gpu 2")
        self.per_gpu = per_gpu
        self.slots = len(self.gpus) * per_gpu if self.gpus else workers
        self._running: dict[int, Running] = {}  # by the slot thread's id

    def running(self) -> list[Running]:
        return sorted(self._running.copy().values(), key=lambda r: r.since)

    def map(self, jobs: list[Job], settings: Settings) -> Iterator[Outcome]:
        threads = cpu_share(self.slots) if not self.gpus else None
        shared = {"OMP_NUM_THREADS": str(threads)} if threads else {}
        envs = [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in self.gpus] or [shared]
        kinds = [service.JudgeSpec.of(settings.replace(device=device), env) for env in envs
                 for device in {job.device for job in jobs}]
        # Per GPU (or this machine): a judge for each slot at work, and one warming up to take
        # the next job. Warming up takes a core while the slots work: where there are too few
        # (a small CPU machine) a service is used if one runs, not started (unless asked: on).
        judges = self.slots // len(envs) + 1
        sizes = gpu_memory_mib(self.gpus) if self.gpus and self.per_gpu > 1 else {}
        # Jobs sharing GPUs whose memory nvidia-smi told take a GPU where their memory fits;
        # else the next free slot.
        slots: FreeSlots | GpuRoom = (
            GpuRoom(GpuMemory(sizes, self.per_gpu, problem_needs(settings, jobs))) if sizes
            else FreeSlots(self._envs(shared, self.per_gpu)))
        spare_cores = (os.cpu_count() or 1) >= 2 * self.slots + 2
        warm = service.serving(settings, pool=judges, kinds=kinds, start_one=spare_cores)
        with warm, ThreadPoolExecutor(max_workers=self.slots,
                                      thread_name_prefix="krung-slot") as pool:
            again: list[Job] = []
            for outcome in self._dispatch(pool, jobs, settings, slots):
                if self.per_gpu > 1 and self.gpus and out_of_memory(outcome):
                    again.append(outcome.job)  # it shared the GPU: run it alone, later
                else:
                    yield outcome
            # One at a time on each GPU: at declared sizes (KernelBench's 6 GiB inputs) two
            # problems on one GPU can exhaust its memory where either alone fits.
            yield from self._dispatch(pool, again, settings, FreeSlots(self._envs(shared, 1)))

    def _envs(self, shared: dict[str, str], per_gpu: int) -> list[dict[str, str]]:
        """The slots' environments: `per_gpu` for each GPU, or `workers` sharing the cores."""
        if self.gpus:
            return [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in self.gpus for _ in range(per_gpu)]
        return [dict(shared) for _ in range(self.slots)]

    def _dispatch(self, pool: ThreadPoolExecutor, jobs: list[Job], settings: Settings,
                  slots: FreeSlots | GpuRoom) -> Iterator[Outcome]:
        return in_turn(pool, jobs, slots.take,
                       lambda job, env: self._run_in_slot(job, settings, env), slots.give_back)

    def _run_in_slot(self, job: Job, settings: Settings, env: dict[str, str]) -> Outcome:
        me = threading.get_ident()
        self._running[me] = Running(job, time.monotonic())

        def progress(rung: str, message: str) -> None:
            self._running[me].at = f"[{rung}] {message}"

        try:
            run = evaluate(job.problem, job.solution, rungs=job.rungs, device=job.device,
                           seed=job.seed, precision=job.precision, settings=settings, env=env,
                           on_progress=progress)
            return Outcome(job, run=run)
        except KrungError as exc:  # this job cannot run (its file is missing, say); the rest can
            return Outcome(job, error=f"{type(exc).__name__}: {exc.message}", hint=exc.hint)
        finally:
            self._running.pop(me, None)


def in_turn(pool: ThreadPoolExecutor, items: list[Any], take: Callable[[Any], Any],
            run: Callable[[Any, Any], Any], give_back: Callable[[Any, Any, Any], None]
            ) -> Iterator[Any]:
    """Each item run on `pool` (`run(item, place)`), in order, as soon as `take(item)` gives
    it a place (an item that must wait for GPU memory lets the ones behind it that fit
    pass); its result yielded when it ends, its place given back first
    (`give_back(item, place, result)`). This thread alone takes and gives back places."""
    waiting = list(items)
    at_work: dict[Future[Any], tuple[Any, Any]] = {}

    def start_what_fits() -> None:
        for item in list(waiting):
            place = take(item)
            if place is not None:
                waiting.remove(item)
                at_work[pool.submit(run, item, place)] = (item, place)

    start_what_fits()
    while at_work:  # an empty GPU takes any job: none waits with nothing at work
        done, _ = wait(at_work, return_when=FIRST_COMPLETED)
        finished = []
        for future in done:
            item, place = at_work.pop(future)
            finished.append(future.result())
            give_back(item, place, finished[-1])
        start_what_fits()
        yield from finished


class FreeSlots:
    """Slots taken in turn, each an environment: a GPU's, or a share of the cores."""

    def __init__(self, envs: list[dict[str, str]]):
        self.envs = envs

    def take(self, job: Job) -> dict[str, str] | None:
        return self.envs.pop(0) if self.envs else None

    def give_back(self, job: Job, env: dict[str, str], outcome: Outcome) -> None:
        self.envs.append(env)


class GpuRoom:
    """Slots on GPUs whose memory is known: a job takes one where its problem's need fits."""

    def __init__(self, memory: GpuMemory):
        self.memory = memory
        self._keys: dict[Job, str] = {}

    def take(self, job: Job) -> dict[str, str] | None:
        gpu = self.memory.take(self._key(job))
        return None if gpu is None else {"CUDA_VISIBLE_DEVICES": gpu}

    def give_back(self, job: Job, env: dict[str, str], outcome: Outcome) -> None:
        self.memory.give_back(env["CUDA_VISIBLE_DEVICES"], self._key(job),
                              outcome.run.env if outcome.run is not None else {})

    def _key(self, job: Job) -> str:
        if job not in self._keys:
            self._keys[job] = problem_key(job)
        return self._keys[job]


def problem_key(job: Job) -> str:
    """The problem's path as the store records it (the job's own text where it names none)."""
    try:
        return str(find_problem(job.problem))
    except KrungError:
        return job.problem


def problem_needs(settings: Settings, jobs: list[Job]) -> dict[str, float]:
    """Each job's problem's device memory: as its recent runs in the store measured it (the
    most of them), else from its declared bytes, where either can be told."""
    # The name the runs record: a precision and a scale of their own are part of it
    names = {key: problem_name(Path(key), job.precision, settings.scale)
             for job in jobs if (key := problem_key(job))}
    needs = _measured(settings, names) if settings.store.exists() else {}
    unmeasured = sorted(k for k in names.keys() - needs.keys()
                        if Path(k).is_file() and detect_format(Path(k)) == KERNELBENCH)
    return {**declared_needs_mib(unmeasured), **needs}


def _measured(settings: Settings, names: dict[str, str]) -> dict[str, float]:
    needs = {}
    with opened(settings.store) as store:
        for key, name in names.items():
            measured = [n for env in store.recent_envs(key, name=name)
                        if (n := measured_need_mib(env)) is not None]
            if measured:
                needs[key] = max(measured)
    return needs


def cpu_share(slots: int) -> int | None:
    """torch's threads for each of `slots` evaluations at once on this machine's cores: the
    cores shared out, at least one each. More would make every elementwise pass of one wait
    for a thread the others' work has descheduled (a comparison 10-25x slower on a loaded
    2-core machine: benchmarks/RESULTS.md). None for one slot, or where the caller set
    OMP_NUM_THREADS."""
    if slots < 2 or "OMP_NUM_THREADS" in os.environ:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // slots)


MEMORY_FAILURES = re.compile(r"out of memory|OUT_OF_MEMORY|OutOfMemoryError|WorkerCrashed",
                             re.IGNORECASE)


def out_of_memory(outcome: Outcome) -> bool:
    """Whether the job failed as a GPU out of memory fails (a worker that died mid-case is
    counted: the OOM killer or a failed cuMemAlloc leave nothing better), not on its merits."""
    texts = [outcome.error or ""]
    if outcome.run is not None:
        texts.append(outcome.run.error or "")
        texts += [f"{r.error_type} {r.error}" for r in outcome.run.rungs
                  if r.status.value == "failed"]
    return bool(MEMORY_FAILURES.search(" ".join(texts)))


def visible_gpus() -> list[str]:
    """The GPU indices nvidia-smi lists (without importing torch in the caller)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip().isdigit()]
