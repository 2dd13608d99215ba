"""How much of a GPU the evaluations sharing it take: a job starts on a GPU with a free slot
where the device memory its problem needs fits beside the jobs at work there, and the jobs
behind one that must wait for room start meanwhile.

At declared sizes a KernelBench elementwise problem holds about 100 GB of the GPU at the
judge's and worker's peaks (its 6 GiB input, the reference's output and the version's, and
their copies) where a matmul holds a few: a fixed number of jobs per GPU runs four of the
first out of memory, or leaves the GPU idle beside the second. A problem's need is what its
runs measured (the judge's and the worker's device peaks, recorded in the store, the larger
of the last few), plus their two CUDA contexts; a problem not yet measured, DECLARED_FACTOR
times its declared bytes (a KernelBench problem's inputs, weights and outputs, described on
torch's meta device: krung.judge.problem.footprint), and one slot's share of the GPU where
neither is known, as before; a run teaches the rest. A job that needs more than a GPU holds
still runs, alone on an empty one.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from typing import Any

CONTEXTS_MIB = 2 * 600.0  # the judge's and the worker's CUDA contexts, outside torch's peaks
# Device bytes the judge and worker hold per byte a problem declares (its inputs, weights and
# outputs): about the median over the KernelBench problems of levels 1-3 declaring 1 GiB or
# more, at declared sizes on an H100 (benchmarks/declared_factor.py: over 84 problems 8,
# 90th percentile 10.7; over 95 at stop 47, 7.6 and 10.6).
# The inputs, reference outputs, unseen cases' and timed sets' copies, in both processes.
DECLARED_FACTOR = 8.0
HEADROOM = 0.92  # of the GPU's memory: the driver, other users, fragmentation


def measured_need_mib(env: dict[str, Any]) -> float | None:
    """A run's device memory: the judge's and the worker's peaks and their contexts (None
    where the run measured none: a CPU run, or one that ended before its worker reported)."""
    peaks = [env.get("judge_device_peak_mib"), env.get("worker_device_peak_mib")]
    if not any(isinstance(p, (int, float)) for p in peaks):
        return None
    return sum(p for p in peaks if isinstance(p, (int, float))) + CONTEXTS_MIB


class GpuMemory:
    """The slots and the device memory of each GPU, shared out among the jobs at work on them
    (by the one thread that starts the jobs: krung.host.scale.local)."""

    def __init__(self, total_mib: dict[str, float], per_gpu: int,
                 needs: dict[str, float] | None = None):
        self.total = {gpu: total * HEADROOM for gpu, total in total_mib.items()}
        self.per_gpu = per_gpu
        self.needs = dict(needs or {})  # by problem path
        self._taken: dict[str, list[tuple[str, float]]] = {gpu: [] for gpu in total_mib}

    def need(self, gpu: str, problem: str) -> float:
        known = self.needs.get(problem)
        return known if known is not None else self.total[gpu] / self.per_gpu

    def free(self, gpu: str) -> float:
        return self.total[gpu] - sum(need for _, need in self._taken[gpu])

    def take(self, problem: str) -> str | None:
        """A GPU with a free slot where the problem's need fits beside the jobs at work (of
        several, the one with the most memory free; an empty one takes any need), taken for
        it; None where there is none now."""
        open_gpus = [gpu for gpu, taken in self._taken.items() if len(taken) < self.per_gpu
                     and (not taken or self.need(gpu, problem) <= self.free(gpu))]
        gpu = max(open_gpus, key=self.free, default=None)
        if gpu is not None:
            self._taken[gpu].append((problem, self.need(gpu, problem)))
        return gpu

    def give_back(self, gpu: str, problem: str, env: dict[str, Any]) -> None:
        """The problem's share of `gpu`, its run finished; what the run measured is the
        problem's need from now on (the larger of it and what was known)."""
        taken = self._taken[gpu]
        taken.remove(next(claim for claim in taken if claim[0] == problem))
        need = measured_need_mib(env)
        if need is not None:
            self.needs[problem] = max(need, self.needs.get(problem, 0.0))


def declared_needs_mib(problem_paths: list[str], timeout_s: float = 300) -> dict[str, float]:
    """Each problem's need from its declared bytes (krung.judge.problem.footprint, in a
    process of its own: the caller stays without torch), where they can be told within
    `timeout_s` for all: DECLARED_FACTOR times the bytes, and the two contexts."""
    if not problem_paths:
        return {}
    # Offline: a problem that loads weights at import (KernelBench level 4) downloads nothing
    # before a suite starts; without a cached copy it fails at once and is left out.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    try:
        told = subprocess.run([sys.executable, "-m", "krung.judge.problem.footprint",
                               *problem_paths], capture_output=True, text=True,
                              timeout=timeout_s, env=env).stdout
    except subprocess.TimeoutExpired as exc:  # keep the problems told before it
        partial = exc.stdout or b""  # bytes, text=True or not
        told = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
    except OSError:
        return {}
    sizes = {}
    for line in told.splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):  # a cut or foreign line
            told_one = json.loads(line)
            sizes[str(told_one["path"])] = float(told_one["bytes"])
    return {path: DECLARED_FACTOR * size / 2**20 + CONTEXTS_MIB for path, size in sizes.items()}


def gpu_memory_mib(gpus: list[str]) -> dict[str, float]:
    """Each listed GPU's memory in MiB as nvidia-smi gives it (empty where it gives none)."""
    return {index: float(total) for index, total in told_by_nvidia_smi("memory.total", gpus).items()
            if total.replace(".", "", 1).isdigit()}


def told_by_nvidia_smi(field: str, gpus: list[str]) -> dict[str, str]:
    """One of nvidia-smi's `--query-gpu` fields (memory.total, name) for each listed GPU, as
    it tells it, without units; empty where it tells nothing."""
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu=index,{field}",
                               "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    told = {}
    for line in done.stdout.splitlines():
        index, _, value = (part.strip() for part in line.partition(","))
        if index in gpus and value:
            told[index] = value
    return told
