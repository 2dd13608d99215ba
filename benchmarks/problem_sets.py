"""KernelBench (levels 1-3) and GPU MODE's reference-kernels, every problem through krung
with its honest baseline, and where asked a wrong version that krung must reject: passed or
failed, wall time, the judge's and the worker's peak memory, every failure explained.

Honest baselines: a KernelBench problem's own source with `ModelNew = Model`; a GPU MODE
problem's reference.py with `custom_kernel = ref_kernel`, and the torch solutions its folder
keeps (`solutions/correct/*.py`); not the GPU MODE folders for several GPUs (`multi_gpu:
true`). Wrong versions: the same with the last element of the (first) output moved by
|value| + 1, and GPU MODE's own `solutions/wrong/*.py`. For
KernelBench, KernelBench's own check (the model and `ModelNew = Model` built from one seed,
`torch.allclose` at its tolerance, as its eval does) runs beside, so a baseline that fails
there too (dropout in training mode) is told apart from one krung fails.

The sets travel as one small tarball (the GPU machine has no network):

    python benchmarks/problem_sets.py pack --kernelbench PATH/KernelBench \\
        --gpumode PATH/reference-kernels -o problem_sets.tar.gz          # ~1 MiB
    python benchmarks/problem_sets.py run problem_sets.tar.gz --device cuda \\
        --out results.json --markdown results.md
    python benchmarks/problem_sets.py run problem_sets.tar.gz --device cpu --scale 0.1 \\
        --levels 1 --limit 20 --wrong 5

`run` writes its JSON after every problem, so an interrupted run keeps what it measured;
`--resume` keeps the rows an earlier run wrote to `--out` and runs the rest, and `--stop-after
S` starts no problem after S seconds: the whole sets at declared sizes, over several device
calls of ten minutes each. A row names the card it ran on; with `--prefer-card REGEX`, a
resumed run on a card whose name matches runs the rows kept from other cards again, after the
jobs not run yet: one card's table, over the calls that card is lent. GPU MODE's quick problems
run first, then KernelBench, then the problems whose authors give a submission more than six
minutes, each given that time (its task.yml's test and benchmark timeouts) where it is more
than `--timeout`. A run past its time is told to stop (SIGTERM, as `timeout` does), and its row
keeps what `krung run --json` printed then: the rungs it finished, with their seconds, and the
step it was in (`rungs_s` holds every row's seconds per rung: where its time went). With
`--jobs N` on a GPU whose memory nvidia-smi tells, a job starts only where its problem's device
memory fits beside the jobs at work (krung.host.scale.gpu_memory, as krung's own suites share a
GPU): at declared sizes, level 1's 6 GiB inputs run a GPU out of memory three at once. A
job whose need is more than the GPU holds, or that ran out of memory beside others before, runs
first, alone, before the service's warm judges hold their CUDA contexts beside it. The
rungs are krung's default ladder (benchmark and artifacts included) unless `--rungs` names
others. The runs take their judges warm from a krung service on the run's store
(`--no-service`: each starts its own, as a first `krung run` does), and KernelBench's own check
runs where krung did not pass the baseline (`--kernelbench-check`), since it is there to
explain a failure: both spare a device call the seconds of starting torch and CUDA again per
problem. GPU MODE's problems make their data on `cuda`; on a CPU they fail
to load, saying so. `--cuda-as-cpu` runs a copy whose `"cuda"` literals read `"cpu"`: not the
problems as they are, but a check of krung's handling of them on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import krung
from krung.host import service
from krung.host.scale.gpu_memory import (
    GpuMemory,
    declared_needs_mib,
    gpu_memory_mib,
    measured_need_mib,
    told_by_nvidia_smi,
)
from krung.host.scale.local import FreeSlots, in_turn
from krung.judge import gpu_lock
from krung.judge.ladder import specs
from krung.protocol.results import INTERRUPTED

KERNELBENCH, GPUMODE = "KernelBench", "reference-kernels"
LEVELS = ("level1", "level2", "level3")
DEFAULT_RUNGS = "default"  # krung's own default ladder: `krung run` without --rungs
PASS, REJECT = "pass", "reject"
QUICK_S = 360  # GPU MODE's usual test and benchmark timeouts together (3 minutes each)
OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|OUT_OF_MEMORY", re.IGNORECASE)


# Packing the two checkouts.

def pack(kernelbench: Path, gpumode: Path, output: Path) -> None:
    """The problems of both checkouts (KernelBench's levels, reference-kernels' problems),
    in one .tar.gz, without git history or anything else."""
    with tarfile.open(output, "w:gz") as tar:
        for level in LEVELS:
            tar.add(kernelbench / KERNELBENCH / level, f"{KERNELBENCH}/{KERNELBENCH}/{level}",
                    filter=_source_only)
        tar.add(gpumode / "problems", f"{GPUMODE}/problems", filter=_source_only)
    print(f"wrote {output} ({output.stat().st_size / 2**20:.2f} MiB)")


def _source_only(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = Path(info.name).name
    if info.isdir():
        return None if name in ("__pycache__", ".git") else info
    return info if Path(name).suffix in (".py", ".yml", ".yaml", ".txt", ".cu", ".cpp",
                                         ".h", ".md") else None


def unpacked(sets: Path, scratch: Path) -> Path:
    """A folder holding KernelBench/ and reference-kernels/: `sets` itself, or the tarball
    unpacked into `scratch`."""
    if sets.is_dir():
        return sets
    with tarfile.open(sets) as tar:
        try:
            tar.extractall(scratch, filter="data")
        except TypeError:  # a Python without extraction filters
            tar.extractall(scratch)
    return scratch


def cuda_as_cpu(root: Path) -> None:
    """Rewrite the GPU MODE problems under `root` to make their data on the CPU."""
    swaps = (('"cuda"', '"cpu"'), ("'cuda'", "'cpu'"), ('"cuda:0"', '"cpu"'),
             (".cuda()", ".cpu()"), ("torch.cuda.synchronize()", "torch.cpu.synchronize()"))
    for path in (root / GPUMODE).rglob("*.py"):
        text = original = path.read_text()
        for old, new in swaps:
            text = text.replace(old, new)
        if text != original:
            path.write_text(text)


# What to run.

@dataclass
class Job:
    family: str  # kernelbench | gpumode
    problem: str  # level1/19_ReLU, pmpp_v2/prefixsum_py
    path: Path
    version: str  # baseline | wrong | repo:correct/ref.py | repo:wrong/empty.py
    expect: str  # pass | reject
    source: Path | None = None  # the version's file (written for baseline and wrong)
    declared_s: float = 0.0  # GPU MODE's task.yml: its test and benchmark timeouts together


@dataclass
class Row:
    family: str
    problem: str
    version: str
    expect: str
    ok: bool = False  # the expectation met
    verdict: str = ""  # passed | failed | error | timeout | problem-error
    failed_rung: str = ""
    error_type: str = ""
    explanation: str = ""
    wall_s: float = 0.0
    # Each process's peaks from the run's env: resident host memory, torch's device memory
    judge_peak_mib: float | None = None
    worker_peak_mib: float | None = None
    judge_gpu_mib: float | None = None
    worker_gpu_mib: float | None = None
    notes: str = ""
    kernelbench_check: str = ""  # KernelBench's own check on the honest baseline
    run_id: str = ""
    card: str = ""  # the GPU it ran on (nvidia-smi's name), "cpu", or "" (not told)
    commit: str = ""  # krung's commit it ran at (rows of several calls may differ)
    # Seconds in each rung that ran (a run stopped at its timeout: those it finished)
    rungs_s: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # Where its judge came from: "service (ready)" or "service (starting)" (warm from the
    # service, or handed out while it still started), "forked", "cold"; "" (not told)
    judge: str = ""


def kernelbench_jobs(root: Path, levels: list[str], versions: Path, wrong_every: int) -> list[Job]:
    """Each problem's honest baseline, and a wrong version for every `wrong_every`th of a
    level, or more often where the level has fewer than `wrong_every` squared problems: a
    level has `wrong_every` of them where it has that many problems (level 3's 50: every
    5th)."""
    jobs = []
    for level in levels:
        files = sorted((root / KERNELBENCH / KERNELBENCH / level).glob("*.py"), key=_numbered)
        jobs += _level_jobs(files, versions, max(1, min(wrong_every, len(files) // wrong_every))
                            if wrong_every else 0)
    return jobs


def _level_jobs(files: list[Path], versions: Path, wrong_every: int) -> list[Job]:
    jobs = []
    for index, path in enumerate(files):
        name = f"{path.parent.name}/{path.stem}"
        source = path.read_text()
        base = _write(versions / "kernelbench" / path.parent.name / f"{path.stem}.py",
                      source + "\n\nModelNew = Model\n")
        jobs.append(Job("kernelbench", name, path, "baseline", PASS, base))
        if wrong_every and index % wrong_every == 0:
            wrong = _write(versions / "kernelbench" / path.parent.name / f"{path.stem}_wrong.py",
                           source + KERNELBENCH_WRONG)
            jobs.append(Job("kernelbench", name, path, "wrong", REJECT, wrong))
    return jobs


def gpumode_jobs(root: Path, versions: Path, wrong_every: int) -> list[Job]:
    """The jobs of every GPU MODE folder that runs on one GPU (not those `several_gpus`
    names). A wrong version for every Nth folder, counted over all of them, so that the rows
    of earlier runs keep theirs."""
    jobs = []
    for index, folder in enumerate(gpumode_folders(root)):
        task = (folder / "task.yml").read_text()
        if runs_on_several_gpus(task):
            continue
        name = f"{folder.parent.name}/{folder.name}"
        reference = (folder / "reference.py").read_text()
        declared = declared_seconds(task)
        base = _write(versions / "gpumode" / folder.parent.name / f"{folder.name}.py",
                      reference + "\n\ncustom_kernel = ref_kernel\n")
        jobs.append(Job("gpumode", name, folder, "baseline", PASS, base, declared))
        for kind, expect in (("correct", PASS), ("wrong", REJECT)):
            for solution in sorted((folder / "solutions" / kind).glob("*.py")):
                jobs.append(Job("gpumode", name, folder, f"repo:{kind}/{solution.name}", expect,
                                solution, declared))
        if wrong_every and index % wrong_every == 0:
            wrong = _write(versions / "gpumode" / folder.parent.name / f"{folder.name}_wrong.py",
                           reference + GPUMODE_WRONG)
            jobs.append(Job("gpumode", name, folder, "wrong", REJECT, wrong, declared))
    return jobs


def gpumode_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / GPUMODE / "problems").glob("*/*/task.yml"))


def several_gpus(root: Path) -> list[str]:
    """The GPU MODE folders whose task.yml says `multi_gpu: true` (amd_distributed's, for
    eight MI300s): their data is made per rank of a distributed job, and krung refuses them
    as such, so they are left out of a one-GPU table."""
    return [f"{folder.parent.name}/{folder.name}" for folder in gpumode_folders(root)
            if runs_on_several_gpus((folder / "task.yml").read_text())]


def runs_on_several_gpus(task_yml: str) -> bool:
    return bool(re.search(r"^multi_gpu:\s*true\b", task_yml, re.MULTILINE | re.IGNORECASE))


def declared_seconds(task_yml: str) -> float:
    """A GPU MODE task's test and benchmark timeouts together (0 where it names none): the
    time its authors give one submission on their GPU."""
    return float(sum(int(m.group(1)) for key in ("test_timeout", "benchmark_timeout")
                     if (m := re.search(rf"^{key}:\s*(\d+)", task_yml, re.MULTILINE))))


def in_running_order(jobs: list[Job]) -> list[Job]:
    """GPU MODE's quick problems first (the most varied: a long run meets krung's bugs early),
    then KernelBench, then the problems whose authors give a submission more than six minutes
    (linalg's eigh, AMD's MoE, bioml's trimul), slowest last: a run cut short by its device
    time leaves out the fewest."""
    def weight(job: Job) -> tuple[int, float]:
        if job.family == "gpumode":
            return (0, 0.0) if job.declared_s <= QUICK_S else (2, job.declared_s)
        return (1, 0.0)

    return sorted(jobs, key=weight)


# The wrong versions: the right answer with the last element of the first output moved.
_SPOIL = '''

def _spoil(out):
    """The output with the last element of its first tensor moved by |value| + 1."""
    import torch

    first = out[0] if isinstance(out, (tuple, list)) else out
    bad = first.detach().clone().contiguous()
    last = bad.view(-1)[-1:]
    if bad.dtype == torch.bool:
        last.logical_not_()
    else:
        last.add_(last.abs() + 1)
    if isinstance(out, (tuple, list)):
        return type(out)([bad, *out[1:]])
    return bad
'''
KERNELBENCH_WRONG = _SPOIL + '''

class ModelNew(Model):
    def forward(self, *args, **kwargs):
        return _spoil(super().forward(*args, **kwargs))
'''
GPUMODE_WRONG = _SPOIL + '''

def custom_kernel(data):
    out = ref_kernel(data)
    spoiled = _spoil(out)
    first = out[0] if isinstance(out, (tuple, list)) else out
    first.copy_(spoiled[0] if isinstance(out, (tuple, list)) else spoiled)  # buffers too
    return out
'''


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _numbered(path: Path) -> tuple[int, str]:
    match = re.match(r"(\d+)_", path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


# Taking turns on the GPU.

def shared_gpu(args: argparse.Namespace, jobs: list[Job],
               kept: dict[tuple[str, str, str], Row],
               alone: frozenset[tuple[str, str]] = frozenset()) -> GpuMemory | None:
    """The memory of the GPU that `--jobs` runs at once share, where nvidia-smi tells it
    (None: the plain pool, for runs on the CPU, one job at a time, or no GPU told). A
    problem's need is what an earlier row of it measured (the rows --resume keeps), else its
    declared bytes (KernelBench at declared sizes), else one job's share of the GPU; the rows
    of this run teach the rest (Turns.give_back). A problem in `alone` (an earlier row ran
    out of GPU memory beside others: its need is unknown, and more than was guessed) needs
    the whole GPU, so it runs alone (first: see `main`) rather than at a run's end the clock
    may never reach. So does a slow GPU MODE problem (its authors give a submission more than
    QUICK_S): its benchmark holds the GPU's lock for minutes, and a job beside it waits that
    long for its own benchmark or roofline, out of its timeout (linalg/qr_v2, beside other
    slow ones, was killed at its 720 s in the roofline rung, which waits for that lock)."""
    if args.jobs < 2 or args.device == "cpu":
        return None
    gpu = first_gpu()
    sizes = gpu_memory_mib([gpu])
    if not sizes:
        return None
    paths = {(job.family, job.problem): str(job.path) for job in jobs}
    measured: dict[str, float] = {}
    for row in kept.values():
        need = measured_need_mib(gpu_peaks(row))
        path = paths[(row.family, row.problem)]
        if need is not None:
            measured[path] = max(need, measured.get(path, 0.0))
    # Declared sizes are the problem's own: a scaled run's are smaller
    unmeasured = sorted({str(job.path) for job in jobs if job.family == "kernelbench"
                         and _key(job) not in kept} - measured.keys()) if args.scale == 1 else []
    declared = declared_needs_mib(unmeasured)
    crowded = {path for family, problem in alone if (path := paths.get((family, problem)))}
    slow = {str(job.path) for job in jobs if job.declared_s > QUICK_S} - crowded
    whole = {path: sizes[gpu] for path in crowded | slow}
    print(f"{args.jobs} jobs at once share GPU {gpu}'s {sizes[gpu]:.0f} MiB: needs measured "
          f"for {len(measured)} problems, declared for {len(declared)}, the whole GPU for "
          f"{len(crowded)} (out of memory beside others before) and {len(slow)} (slow: "
          f"given more than {QUICK_S} s), 1/{args.jobs} of the GPU for the rest", flush=True)
    return GpuMemory(sizes, args.jobs, {**declared, **measured, **whole})


def bigger_than_the_gpu(memory: GpuMemory | None, job: Job) -> bool:
    """Whether a job's problem needs more than its GPU holds (measured by an earlier row, or
    declared: eight times level1/45_Average_Pooling_2D's 16 GiB input): it runs alone
    whatever its turn. Not a slow GPU MODE problem, which is given the whole GPU for its
    time, not its memory, and runs in its turn."""
    if memory is None or job.declared_s > QUICK_S:
        return False
    return any(memory.need(gpu, str(job.path)) > total for gpu, total in memory.total.items())


def first_gpu() -> str:
    """The GPU krung's runs use: the first they see."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()


def card_of(device: str) -> str:
    """The card this run's rows are measured on: the first visible GPU's name as nvidia-smi
    tells it; "cpu" for --device cpu, or --device auto where no GPU is told; else ""."""
    name = told_by_nvidia_smi("name", [first_gpu()]).get(first_gpu()) if device != "cpu" else None
    return name or ("cpu" if device in ("cpu", "auto") else "")


def krung_commit() -> str:
    """krung's commit: KRUNG_GATE_COMMIT where a device call names it (the copy of the working
    tree there may have no .git, or another checkout's), else git's HEAD, else ""."""
    if os.environ.get("KRUNG_GATE_COMMIT"):
        return os.environ["KRUNG_GATE_COMMIT"][:7]
    with contextlib.suppress(OSError):
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent).stdout.strip()
    return ""


def gpu_peaks(row: Row) -> dict[str, float | None]:
    """A row's device peaks, as krung's run env names them."""
    return {"judge_device_peak_mib": row.judge_gpu_mib,
            "worker_device_peak_mib": row.worker_gpu_mib}


class Turns:
    """The jobs' turns to start, in running order, `at_once` at a time (krung's own suite's
    turns: krung.host.scale.local.in_turn). With a GPU's memory, a job starts only where its
    problem's need fits beside the jobs at work (an empty GPU takes any: one bigger than the
    GPU runs alone), and the jobs behind one that waits for room start meanwhile; without,
    the plain pool."""

    def __init__(self, jobs: dict[int, Job], memory: GpuMemory | None):
        self.jobs = list(jobs)  # indices into the run's jobs, in running order
        self.problems = {index: str(job.path) for index, job in jobs.items()}
        self.memory = memory

    def run(self, at_once: int, one: Callable[[int], Row | None]) -> None:
        """Every job run by `one` (its row, None where it did not run) in its turn."""
        slots = None if self.memory else FreeSlots([{}] * at_once)
        take = slots.take if slots else self.take
        give_back = slots.give_back if slots else self.give_back
        with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
            for _ in in_turn(pool, self.jobs, take, lambda index, _: one(index), give_back):
                pass

    def take(self, index: int) -> str | None:
        """A GPU where the job's need fits now, taken for it; None while there is none."""
        assert self.memory is not None
        return self.memory.take(self.problems[index])

    def give_back(self, index: int, gpu: str, row: Row | None) -> None:
        """The job's room, its run over; what its row measured is its problem's need from
        now on (the most known)."""
        assert self.memory is not None
        self.memory.give_back(gpu, self.problems[index],
                              gpu_peaks(row) if row is not None else {})


# Running one job.

def job_env(args: argparse.Namespace, store: Path) -> dict[str, str]:
    """The environment of every run, and of the service: one kind of judge serves them all."""
    return dict(os.environ, KRUNG_STORE=str(store), KRUNG_SCALE=str(args.scale),
                PYTHONUNBUFFERED="1")


@contextlib.contextmanager
def warm_judges(args: argparse.Namespace, store: Path) -> Iterator[None]:
    """A krung service on the run's store for the runs' length, keeping `--pool` judges
    started (default two per job: one at work, one warming up, as `krung batch` does)."""
    if not args.service:
        yield
        return
    store.parent.mkdir(parents=True, exist_ok=True)
    krung = [sys.executable, "-m", "krung", "service"]
    env = job_env(args, store)
    pool = args.pool or 2 * max(1, args.jobs)
    started = subprocess.run([*krung, "start", "--pool", str(pool),
                              "--idle", "900"], env=env, capture_output=True, text=True)
    if started.returncode != 0:  # the runs go on cold, as `krung run` does without one
        print(f"no krung service ({started.stderr.strip()[-300:]}); each run starts its "
              "own judge", flush=True)
    try:
        yield
    finally:
        subprocess.run([*krung, "stop"], env=env, capture_output=True)


def run_job(job: Job, args: argparse.Namespace, store: Path) -> Row:
    row = Row(job.family, job.problem, job.version, job.expect, card=args.card,
              commit=args.commit)
    env = job_env(args, store)
    rungs = [] if args.rungs == DEFAULT_RUNGS else ["--rungs", args.rungs]
    command = [sys.executable, "-m", "krung", "run", str(job.path), str(job.source), *rungs,
               "--device", args.device, "--json"]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env,
                                   start_new_session=True, cwd=job.path.parent)
        try:
            process.wait(timeout=job_timeout(job, args))
        except subprocess.TimeoutExpired:
            lock = gpu_lock_state()  # before the stop, which frees what the run held
            stop(process)
            row.verdict = "timeout"
        row.wall_s = round(time.perf_counter() - start, 1)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if row.verdict == "timeout":
        row.explanation = (f"no answer within {job_timeout(job, args):g} s"
                           + _where_it_was(row, stdout, args.rungs) + lock)
    else:
        _read_outcome(row, process.returncode, stdout, stderr)
        row.judge = judge_origin(stdout, service.handed_out(store))
    expected = row.verdict == ("passed" if job.expect == PASS else "failed")
    # Out of GPU memory is the machine's answer, not krung's verdict on the version
    row.ok = expected and not _out_of_memory(row)
    return row


# Free device memory a judge's cache keeps and cannot give back (segments a small live block
# holds), worth a note: what the L2 flush buffer and cuBLAS's workspace would pin.
PINNED_NOTE_MIB = 256
STOP_GRACE_S = 30  # for a run stopped at its timeout to print what it had done


def job_timeout(job: Job, args: argparse.Namespace) -> float:
    """--timeout, or the time the problem's authors give a submission where that is longer."""
    return max(args.timeout, job.declared_s)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, which `krung run --json` answers with the run as recorded (the rungs it
    finished, and where it was stopped) once it has stopped its judge; its whole process group
    killed after STOP_GRACE_S. Only krung's process is told: a judge in its group told too
    could die first, which krung would report as the judge's failure."""
    process.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):  # the judge and worker, should any be left
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _where_it_was(row: Row, stdout: str, ladder: str) -> str:
    """What a run stopped at its timeout had done, as it printed it: the rungs it finished
    and their seconds (kept in the row), and the one it was in (the next of `ladder`,
    --rungs), with krung's own words for where."""
    try:
        run = json.loads(stdout)
        rungs = run["rungs"]
    except (json.JSONDecodeError, TypeError, KeyError):
        return "; it printed nothing when stopped"
    row.run_id = run.get("run_id") or ""
    row.rungs_s = rung_seconds(rungs)
    done = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in row.rungs_s.items())
    where = (run.get("error") or "").removeprefix(INTERRUPTED).split(";")[0].strip()
    return (f"; rungs finished before: {done or 'none'}"
            + _killed_in(ladder, {rung["name"] for rung in rungs})
            + (f"; krung said it was {where}" if where else ""))


def rung_seconds(rungs: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds in each rung of a run's JSON that ran (not skipped)."""
    return {rung["name"]: round(rung.get("duration_s") or 0.0, 1)
            for rung in rungs if rung["status"] != "skipped"}


def gpu_lock_state(folder: Path | None = None) -> str:
    """Whether krung's GPU lock (krung.judge.gpu_lock: a flock on a file in the temporary
    folder) is held now, and how many evaluations wait for it, as /proc/locks
    tells; "" where none holds it or it cannot be told. At a timeout in a rung that waits
    for the GPU: whether the time may have gone on waiting."""
    folder = folder or Path(tempfile.gettempdir())
    with contextlib.suppress(OSError, ValueError, IndexError):
        files = {os.stat(path).st_ino for path in folder.glob(gpu_lock.NAME.format("*"))}
        held = waiting = 0
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()  # `1: [->] FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF`
            if "FLOCK" in fields:
                inode = int(fields[fields.index("FLOCK") + 4].rsplit(":", 1)[1])
                if inode in files:
                    waiting += "->" in fields
                    held += "->" not in fields
        if held:
            return (f"; when it was killed, the GPU's lock was held and {waiting} "
                    f"evaluation{'s' if waiting != 1 else ''} waited for it")
    return ""


def _killed_in(ladder: str, finished: set[str]) -> str:
    """The rung a killed run was in, and where it waits for the GPU to itself, that it may
    have spent its time waiting for another job's measurement."""
    planned = krung.select_rungs(None if ladder == DEFAULT_RUNGS else ladder)
    rung = next((name for name in planned if name not in finished), None)
    if rung is None:
        return ""
    waits = specs()[rung].exclusive_gpu
    return f"; killed in {rung}" + (" (a rung that waits for the GPU to itself while another "
                                    "job measures on it)" if waits else "")


def _read_outcome(row: Row, code: int, stdout: str, stderr: str) -> None:
    try:
        run = json.loads(stdout)
    except json.JSONDecodeError:
        run = None
    if not isinstance(run, dict) or "rungs" not in run:
        row.verdict = "problem-error" if code == 2 else "error"
        if isinstance(run, dict) and run.get("error"):  # --json: the error is on stdout
            row.error_type = str(run.get("error_type") or "")
            row.explanation = f"{run['error']}; hint: {run.get('hint') or '-'}"[:600]
            return
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        row.explanation = " ".join(lines[-3:])[:600] or f"exit status {code}"
        return
    row.run_id = run.get("run_id") or ""
    env = run.get("env") or {}
    # Each process's peaks as it measured them (a judge of the service is not this run's child)
    row.judge_peak_mib = _rounded(env.get("judge_host_peak_mib"))
    row.worker_peak_mib = _rounded(env.get("worker_host_peak_mib"))
    row.judge_gpu_mib = _rounded(env.get("judge_device_peak_mib"))
    row.worker_gpu_mib = _rounded(env.get("worker_device_peak_mib"))
    if env.get("before_rungs_s"):  # the judge's steps before the first rung, by name
        row.extra["before_rungs_s"] = env["before_rungs_s"]
    notes = []
    if env.get("first_try"):  # krung's judge failed first: the second try's row hides it
        notes.append(f"krung's first try failed: {env['first_try'].get('error', '')[:300]}")
    if (env.get("judge_device_pinned_mib") or 0) >= PINNED_NOTE_MIB:
        notes.append(f"the judge's cache kept {env['judge_device_pinned_mib']:.0f} MiB free "
                     "that it could not hand back")
    if env.get("scaled_sizes"):
        notes.append("scaled " + ", ".join(f"{k} {v}" for k, v in env["scaled_sizes"].items()))
    if env.get("scale_note"):
        notes.append(env["scale_note"])
    row.rungs_s = rung_seconds(run["rungs"])
    for rung in run["rungs"]:
        figures = rung.get("figures") or {}
        if figures.get("unseen_skipped"):
            notes.append(f"unseen skipped: {figures['unseen_skipped']}")
        if rung["status"] == "skipped" and not rung.get("reason", "").startswith("needs "):
            notes.append(f"{rung['name']} skipped: {rung.get('reason')}")
    row.notes = "; ".join(notes)[:800]
    failed = next((r for r in run["rungs"] if r["status"] == "failed"), None)
    if run.get("error"):
        row.verdict = "error"
        row.explanation = str(run["error"])[:600]
    elif failed:
        row.verdict = "failed"
        row.failed_rung = failed["name"]
        row.error_type = failed.get("error_type") or ""
        row.explanation = (failed.get("error") or "")[:600]
    else:
        row.verdict = "passed"


def judge_origin(stdout: str, handed: list[tuple[int, str]]) -> str:
    """Where the run's judge came from, as its env says; for one of the service's, whether it
    was ready when handed out (`handed`, the service's log): a judge still starting costs
    the run its torch import and CUDA start, outside its rungs."""
    with contextlib.suppress(json.JSONDecodeError, AttributeError):
        env = json.loads(stdout).get("env") or {}
        origin, pid = str(env.get("judge") or ""), env.get("judge_pid")
        if origin != "service" or not pid:
            return origin
        said = [state for handed_pid, state in handed if handed_pid == int(pid)]
        return f"service ({said[-1]})" if said else origin  # its last: pids come round
    return ""


def outside_rungs_s(row: Row) -> float | None:
    """A finished run's wall time outside its rungs: `krung run`'s start, its judge taken
    (started, where it was not warm), the problem loaded, the processes ended."""
    if not row.rungs_s or row.verdict == "timeout":
        return None
    return max(0.0, row.wall_s - sum(row.rungs_s.values()))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


# KernelBench's own check, run the way its eval runs it.

def kernelbench_check(path: Path, scale: float, device: str, trials: int = 5,
                      seed: int = 42) -> dict[str, Any]:
    """Model and `ModelNew = Model` built from one seed, called on the same inputs per
    trial (one after the other, the global generator running on, as KernelBench's eval
    does), and compared with torch.allclose at KernelBench's fp32 tolerance."""
    import torch

    from krung.judge.problem.kernelbench import scale_constants
    from krung.judge.problem.native import import_problem_file
    from krung.judge.problem.sizes import Constants

    module = import_problem_file(path, f"kbcheck_{path.stem}", path)
    if scale != 1:
        scale_constants(Constants(path, module), scale)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"

    def placed(values: list) -> list:
        return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]

    torch.manual_seed(seed)
    init = placed(module.get_init_inputs())
    torch.manual_seed(seed)
    model = module.Model(*init).to(device)
    torch.manual_seed(seed)
    model_new = module.Model(*init).to(device)
    torch.manual_seed(seed)
    trial_seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]
    with torch.no_grad():
        for number, trial in enumerate(trial_seeds):
            torch.manual_seed(trial)
            inputs = placed(module.get_inputs())
            out, new = model(*inputs), model_new(*inputs)
            pairs = zip(out, new, strict=True) if isinstance(out, (tuple, list)) \
                else [(out, new)]
            for a, b in pairs:
                if a.shape != b.shape or not torch.allclose(a, b, atol=1e-4, rtol=1e-4):
                    return {"passed": False, "trial": number,
                            "max_diff": float((a.double() - b.double()).abs().max())
                            if a.shape == b.shape else None}
    return {"passed": True, "trials": trials}


def run_kernelbench_check(job: Job, args: argparse.Namespace) -> str:
    command = [sys.executable, __file__, "kbcheck", str(job.path), "--scale", str(args.scale),
               "--device", args.device]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return "raised: " + (lines[-1][:200] if lines else f"exit status {done.returncode}")
    if answer["passed"]:
        return "passed"
    return f"failed (trial {answer['trial']}, max diff {answer['max_diff']})"


# The report.

# Why a row did not meet its expectation, where the cause is known: (problem, text of the
# row's failure, the cause in a sentence). The first match names it; a failure none matches
# is counted as not yet explained. The problem-specific ones were read in the problems'
# sources (benchmarks/RESULTS.md has the reading).
CAUSES: list[tuple[str, str, str]] = [
    (r"conv2d_py", r"Mismatch.*problem's own check",
     "the problem's: its reference turns cuDNN's TF32 off, this solution leaves torch's "
     "default (on), and its own check's rtol 1e-5 refuses TF32; GPU MODE's eval would too"),
    (r"pmpp_v2/vectorsum_py", r"SIZE MISMATCH",
     "the problem's: its reference returns a 0-d sum, the solution the data's (1,) buffer, "
     "and its own check compares shapes first"),
    (r"Dropout", r"NondeterministicReference",
     "the problem's: its reference is nondeterministic by design (it draws random numbers: "
     "dropout in training mode), so no version can match it element by element"),
    ("", r"NondeterministicReference.*global random generator",
     "the problem's: its reference draws from torch's random generator on every call, so no "
     "version can match it element by element"),
    ("", r"NondeterministicReference.*differs in (\d+)/(\d+) elements",
     "krung's tolerance, not yet fixed: the reference's own two runs on the same inputs "
     "differ in {0} of {1} elements (rounding, in a nondeterministic library algorithm), and "
     "krung's tolerance is tighter than that spread on a few elements; no version can pass "
     "such a case reliably"),
    ("", r"No module named '([\w.]+)'", "a package the problem needs is not installed: {0}"),
    ("", r"CUBLAS_STATUS_NOT_SUPPORTED",
     "the problem's data needs cuBLASLt's block-scaled FP4 matmul: a Blackwell GPU's"),
    ("", r"takes a `rank`", "a multi-GPU problem: its data is made per rank of a distributed job"),
    ("", r"cannot send a Python object",
     "its data holds an object of the problem's own class, which krung does not pickle to the "
     "version's process"),
    ("", r"(?s)defines no `generate_input`.*defines no `ref_kernel`",
     "not GPU MODE's problem contract: its reference.py has no generate_input, ref_kernel or "
     "check_implementation (its own eval.py calls the submission's functions by name), the "
     "contract krung reads a GPU MODE problem by"),
]
ALONE = "run again alone"


def cause(row: Row) -> str:
    """Why the row did not meet its expectation, in a sentence, where known; "" where it did
    or the cause is not known."""
    if row.ok:
        return ""
    text = f"{row.error_type} {row.explanation}"
    for problem, said, sentence in CAUSES:
        found = re.search(said, text)
        if re.search(problem, row.problem) and found:
            return sentence.format(*found.groups())
    if OUT_OF_MEMORY.search(text):
        return ("out of GPU memory at the declared sizes, alone on the GPU" if ALONE in row.notes
                else "out of GPU memory beside other processes (other problems' runs, or the "
                     "krung service's idle judges, each with its CUDA context): measured again "
                     "alone at the end of the run, or on --resume")
    if row.verdict == "timeout":
        return f"ran past its {row.wall_s:g} s"
    return ""


def markdown(rows: list[Row], args: argparse.Namespace) -> str:
    judges = "warm, from a krung service" if getattr(args, "service", False) else "cold"
    lines = [f"Device {args.device}, scale {args.scale:g}, rungs {args.rungs}, judges {judges}.",
             ""]
    for family in ("kernelbench", "gpumode"):
        mine = [r for r in rows if r.family == family]
        if not mine:
            continue
        base = [r for r in mine if r.expect == PASS]
        wrong = [r for r in mine if r.expect == REJECT]
        lines.append(f"**{family}**: honest baselines passed {sum(r.ok for r in base)}/"
                     f"{len(base)}; wrong versions rejected {sum(r.ok for r in wrong)}/"
                     f"{len(wrong)}."
                     + (" The folders whose task.yml says `multi_gpu: true` are not run: "
                        "this table is one GPU's." if family == "gpumode" else ""))
        own = [r for r in base if r.kernelbench_check]
        if own:  # every baseline with --kernelbench-check all, else those krung failed
            fine = [r for r in own if r.kernelbench_check == "passed"]
            lines.append(f"KernelBench's own check ({args.kernelbench_check}) passed the "
                         f"baseline on {len(fine)}/{len(own)}; of those krung passed "
                         f"{sum(r.ok for r in fine)}.")
        lines.append("")
    cards = Counter(r.card or "not told" for r in rows)
    lines += ["Cards: " + "; ".join(f"{card} {n} row{'s' * (n != 1)}"
                                        for card, n in cards.most_common())
              + ".", ""]
    many = len(cards) > 1  # then each row names its own
    commits = Counter(r.commit or "not told" for r in rows)
    lines += ["krung at: " + "; ".join(f"{commit} {n} row{'s' * (n != 1)}"
                                       for commit, n in commits.most_common()) + ".", ""]
    lines += where_time_went(rows)
    missed = [r for r in rows if not r.ok]
    if missed:
        unknown = [r for r in missed if not cause(r)]
        lines += [f"Not met: {len(missed)} rows, {len(missed) - len(unknown)} of them with a "
                  f"known cause; {len(unknown)} not yet explained"
                  + (f" ({', '.join(sorted({r.problem for r in unknown})[:12])})"
                     if unknown else "") + ".", ""]
    heads = ["problem", "version", "expect", "result", "wall s", "slowest rung s",
             "judge MiB", "worker MiB",
             "judge GPU MiB", "worker GPU MiB", "KernelBench check", "failure, explained",
             "notes", *["card"] * many]
    lines.append("| " + " | ".join(heads) + " |")
    lines.append("|" + "---|" * len(heads))
    for r in rows:
        result = ("ok" if r.ok else "**NOT MET**") + f" ({r.verdict})"
        failure = f"{r.failed_rung}: {r.explanation}" if r.failed_rung else r.explanation
        if cause(r):
            failure = f"**{cause(r)}**: {failure}"
        elif not r.ok:
            failure = f"**not yet explained**: {failure}"
        cells = [r.problem, r.version, r.expect, result, f"{r.wall_s:g}", _slowest(r),
                 _cell(r.judge_peak_mib), _cell(r.worker_peak_mib),
                 _cell(r.judge_gpu_mib),
                 _cell(r.worker_gpu_mib), r.kernelbench_check, failure, r.notes,
                 *[r.card or "not told"] * many]
        lines.append("| " + " | ".join(_escape(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def where_time_went(rows: list[Row]) -> list[str]:
    """The rows' wall time in their rungs and outside them, and outside them by where their
    judges came from (the rows that say so)."""
    timed = [(r, outside) for r in rows if (outside := outside_rungs_s(r)) is not None]
    if not timed:
        return []
    wall = sum(r.wall_s for r, _ in timed)
    outside = sum(o for _, o in timed)
    line = (f"Wall time of the {len(timed)} finished runs: {wall:.0f} s, {outside:.0f} s of it "
            f"outside their rungs (median {statistics.median(o for _, o in timed):.1f} s a run)")
    by_judge: dict[str, list[float]] = {}
    for r, o in timed:
        if r.judge:
            by_judge.setdefault(r.judge, []).append(o)
    if by_judge:
        line += "; by where the judge came from: " + "; ".join(
            f"{judge} {len(times)} runs, median {statistics.median(times):.1f} s outside"
            for judge, times in sorted(by_judge.items(), key=lambda item: -len(item[1])))
    steps: Counter[str] = Counter()
    for r, _ in timed:
        steps.update(r.extra.get("before_rungs_s") or {})
    if steps:
        line += ("; the judges' steps before the first rung, summed: "
                 + ", ".join(f"{step} {seconds:.1f} s" for step, seconds in steps.most_common()))
    return [line + ".", ""]


def _slowest(row: Row) -> str:
    """The rung the row's run spent most seconds in, with them: where its time went."""
    if not row.rungs_s:
        return "-"
    name = max(row.rungs_s, key=row.rungs_s.__getitem__)
    return f"{name} {row.rungs_s[name]:g}"


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:400]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="make the tarball of both checkouts")
    packing.add_argument("--kernelbench", type=Path, required=True)
    packing.add_argument("--gpumode", type=Path, required=True)
    packing.add_argument("-o", "--output", type=Path, default=Path("problem_sets.tar.gz"))
    running = commands.add_parser("run", help="run every problem through krung")
    running.add_argument("sets", type=Path, help="the tarball, or a folder holding "
                                                 "KernelBench/ and reference-kernels/")
    running.add_argument("--scale", type=float, default=1.0)
    running.add_argument("--levels", default="1,2,3", help="KernelBench levels; 0 for none")
    running.add_argument("--gpumode", default="all",
                         help="GPU MODE problems: all, none, or a regex over group/name")
    running.add_argument("--only", default="", help="a regex the problem's name must match")
    running.add_argument("--device", default="auto")
    running.add_argument("--rungs", default=DEFAULT_RUNGS)
    running.add_argument("--limit", type=int, default=0, help="at most this many jobs")
    running.add_argument("--wrong", type=int, default=1,
                         help="a wrong version for every Nth problem (0: none); a KernelBench "
                              "level has N where it has that many problems (level 3's 50: "
                              "every 5th)")
    running.add_argument("--jobs", type=int, default=1,
                         help="problems run at once, at most: on a GPU, each starts where "
                              "its device memory fits beside the others")
    running.add_argument("--timeout", type=float, default=1800.0,
                         help="seconds per run (more where a GPU MODE task gives more)")
    running.add_argument("--kernelbench-check", choices=("failed", "all", "none"),
                         default="failed", help="KernelBench's own check of the baseline: "
                         "where krung did not pass it (default), on every one, or none")
    running.add_argument("--pool", type=int, default=0,
                         help="judges the service keeps started, at work and warming up "
                              "(default: two per job); where the table shows runs handed "
                              "judges still starting, more keep up with short runs")
    running.add_argument("--service", action=argparse.BooleanOptionalAction, default=True,
                         help="judges started ahead by a krung service (default), or each "
                              "run's own")
    running.add_argument("--cuda-as-cpu", action="store_true",
                         help="GPU MODE problems rewritten to make their data on the CPU")
    running.add_argument("--out", type=Path, default=Path("problem_sets.json"))
    running.add_argument("--resume", action="store_true",
                         help="keep the rows already in --out and run only the other jobs")
    running.add_argument("--rerun", default="",
                         help="with --resume: a regex over problem names whose kept rows run "
                              "again (a krung bug fixed since they ran)")
    running.add_argument("--prefer-card", default="", metavar="REGEX",
                         help="with --resume, on a card whose name matches: the rows kept "
                              "from other cards run again, after the jobs not run yet")
    running.add_argument("--stop-after", type=float, default=0,
                         help="seconds after which no job starts (0: none); --resume goes on")
    running.add_argument("--markdown", type=Path, default=None)
    table = commands.add_parser("table", help="the markdown table of a run's JSON (a "
                                "partial one too: a run over several calls)")
    table.add_argument("json", type=Path)
    table.add_argument("--device", default="cuda")
    table.add_argument("--scale", type=float, default=1.0)
    table.add_argument("--rungs", default=DEFAULT_RUNGS)
    checking = commands.add_parser("kbcheck", help="KernelBench's own check, one problem")
    checking.add_argument("path", type=Path)
    checking.add_argument("--scale", type=float, default=1.0)
    checking.add_argument("--device", default="auto")
    args = parser.parse_args()

    if args.command == "pack":
        pack(args.kernelbench, args.gpumode, args.output)
        return
    if args.command == "table":
        args.service, args.kernelbench_check = True, "failed"
        print(markdown([Row(**row) for row in json.loads(args.json.read_text())], args), end="")
        return
    if args.command == "kbcheck":
        print(json.dumps(kernelbench_check(args.path, args.scale, args.device)))
        return
    with tempfile.TemporaryDirectory(prefix="krung-problem-sets-") as scratch:
        args.sets = args.sets.resolve()  # each `krung run` starts in its problem's folder
        root = unpacked(args.sets, Path(scratch) / "sets")
        if args.cuda_as_cpu:
            if root == args.sets:  # never rewrite the checkout itself
                root = Path(shutil.copytree(root, Path(scratch) / "sets"))
            cuda_as_cpu(root)
        versions, store = Path(scratch) / "versions", Path(scratch) / "store" / "krung.db"
        levels = [f"level{n}" for n in args.levels.split(",") if n.strip() not in ("", "0")]
        jobs = [] if args.gpumode == "none" else [
            j for j in gpumode_jobs(root, versions, args.wrong)
            if args.gpumode == "all" or re.search(args.gpumode, j.problem)]
        left = [name for name in several_gpus(root) if args.gpumode == "all"
                or re.search(args.gpumode, name)] if args.gpumode != "none" else []
        if left:
            print(f"left out: {len(left)} GPU MODE folders that run on several GPUs "
                  f"(multi_gpu: true): {', '.join(left)}", flush=True)
        if levels:
            jobs += kernelbench_jobs(root, levels, versions, args.wrong)
        jobs = in_running_order(jobs)
        jobs = [j for j in jobs if re.search(args.only, j.problem)]
        if args.limit:
            jobs = jobs[:args.limit]
        earlier, elsewhere = _earlier_rows(args.out, jobs) if args.resume else ([], [])
        # kept, but a timeout or a run out of GPU memory, measured again: such a problem alone
        kept = {_key(r): r for r in earlier if r.verdict != "timeout" and not _out_of_memory(r)}
        alone = frozenset((r.family, r.problem) for r in earlier
                          if not r.ok and _out_of_memory(r))
        if args.rerun:
            kept = {key: row for key, row in kept.items() if not re.search(args.rerun, key[1])}
        args.card, args.commit = card_of(args.device), krung_commit()
        preferred = bool(args.prefer_card) and bool(re.search(args.prefer_card, args.card))
        # kept until run again, and run after the jobs not run yet
        other_cards = {key for key, row in kept.items()
                       if preferred and not re.search(args.prefer_card, row.card)}
        if other_cards:
            print(f"{len(other_cards)} rows kept from other cards run again on "
                  f"{args.card}, after the jobs not run yet", flush=True)
        kept_problems = {problem for _, problem, _ in kept.keys() - other_cards}
        # every earlier row stays in --out until its job has run again: a run cut short (its
        # device call's end) loses none of them, nor what they tell the next run (`alone`)
        earlier_rows = {_key(row): row for row in earlier}
        rows: list[Row | None] = [earlier_rows.get(_key(job)) for job in jobs]
        lock = threading.Lock()
        started = time.monotonic()
        left_out = []

        def one(index: int, alone_why: str = "") -> Row | None:
            job = jobs[index]
            if args.stop_after and time.monotonic() - started > args.stop_after:
                left_out.append(job)
                return None
            row = run_job(job, args, store)
            if (job.family, job.problem) in alone:
                alone_why = "out of GPU memory beside others before"
            elif index in bigger:
                alone_why = "its need is more than the GPU holds beside others"
            if alone_why:  # in the row before it is written
                row.notes = "; ".join(filter(None, [f"{ALONE} ({alone_why})", row.notes]))
            if (job.family == "kernelbench" and job.version == "baseline"
                    and (args.kernelbench_check == "all"
                         or (args.kernelbench_check == "failed" and not row.ok))):
                row.kernelbench_check = run_kernelbench_check(job, args)
            with lock:
                rows[index] = row
                done = [r for r in rows if r is not None]
                args.out.write_text(json.dumps([asdict(r) for r in [*elsewhere, *done]],
                                               indent=1))
                print(f"[{len(done)}/{len(jobs)}] {row.problem} {row.version}: "
                      f"{'ok' if row.ok else 'NOT MET'} ({row.verdict}) {row.wall_s:g} s "
                      f"{row.error_type} {row.explanation[:160]}", flush=True)
            return row

        # the rows an earlier run measured (--resume) are kept, the rest run in turns: the
        # problems that ran out of GPU memory beside others, or need more than the GPU holds,
        # first, one at a time, before the service starts: its idle judges hold a CUDA
        # context each beside a run (at least five pairs of 822 and 534 MiB beside
        # level1/35_GroupNorm_'s, out of memory on an 80 GB H100 with no other job); in
        # their turn, the jobs behind that fit would pass them until the run's end
        waiting = turn_order(jobs, kept, other_cards)
        shared = shared_gpu(args, jobs, kept, alone)
        crowded = [i for i in waiting if (jobs[i].family, jobs[i].problem) in alone]
        bigger = [i for i in waiting if i not in crowded and bigger_than_the_gpu(shared, jobs[i])]
        first = crowded + bigger
        if first:
            print(f"{len(first)} jobs run first, one at a time, with no warm judges beside "
                  f"them: {len(crowded)} that ran out of GPU memory beside others before, "
                  f"{len(bigger)} whose need is more than the GPU holds", flush=True)
            Turns({i: jobs[i] for i in first}, None).run(1, one)
        turns = Turns({i: jobs[i] for i in waiting if i not in first}, shared)
        with warm_judges(args, store):
            turns.run(max(1, args.jobs), one)
        if args.jobs > 1:  # out of GPU memory beside another problem: once more, alone
            for index, row in enumerate(rows):
                if (row is not None and not row.ok and row.problem not in kept_problems
                        and (row.family, row.problem) not in alone
                        and _out_of_memory(row)):
                    one(index, "out of GPU memory beside another")
    finished = [r for r in rows if r is not None]
    if args.markdown:
        args.markdown.write_text(markdown(finished, args))
    met = sum(r.ok for r in finished)
    print(f"{met}/{len(finished)} met their expectation; results in {args.out}"
          + (f"; {len(left_out)} not started (--stop-after; --resume goes on)"
             if left_out else ""))


def turn_order(jobs: list[Job], kept: dict[tuple[str, str, str], Row],
               other_cards: set[tuple[str, str, str]]) -> list[int]:
    """The indices of the jobs to run, in running order: those with no row kept, then those
    whose kept rows are from other cards (--prefer-card). In running order, not a set's: a
    set of indices past its table's size iterates out of order (stop 51's run started the
    slow GPU MODE problems, each on an empty GPU, while level1/46_Average_Pooling_3D, ahead
    of them, waited for one)."""
    new = [i for i, job in enumerate(jobs) if _key(job) not in kept]
    again = [i for i, job in enumerate(jobs) if _key(job) in other_cards]
    return new + again


def _key(item: Job | Row) -> tuple[str, str, str]:
    return item.family, item.problem, item.version


def _earlier_rows(out: Path, jobs: list[Job]) -> tuple[list[Row], list[Row]]:
    """The rows an earlier run wrote to `out`: those of these jobs, and the others (of jobs
    this run leaves out: --only, --levels, --limit), which it writes back as they are."""
    if not out.exists():
        return [], []
    wanted = {_key(job) for job in jobs}
    rows = [Row(**row) for row in json.loads(out.read_text())]
    return ([row for row in rows if _key(row) in wanted],
            [row for row in rows if _key(row) not in wanted])


def _out_of_memory(row: Row) -> bool:
    return bool(OUT_OF_MEMORY.search(f"{row.error_type} {row.explanation}"))


if __name__ == "__main__":
    main()
