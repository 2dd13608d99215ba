"""benchmarks/problem_sets.py's jobs at once on one GPU: each starts only where its problem's
device memory fits beside the jobs at work (krung.host.scale.gpu_memory), in running order as
far as memory allows; without a GPU, the plain pool. The GPU is a stand-in nvidia-smi (this
machine has none); the jobs' needs are what earlier rows measured, or KernelBench's declared
bytes."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from benchmarks import problem_sets as sets

from krung.host.scale.gpu_memory import CONTEXTS_MIB, DECLARED_FACTOR, HEADROOM
from krung.judge import gpu_lock
from tests.conftest import KERNELBENCH, REPO
from tests.test_gpu_memory import kernelbench_problem

H100_MIB = 81_559.0  # what nvidia-smi tells of an 80 GB H100
USABLE = H100_MIB * HEADROOM
SETTLE_S = 0.3  # how long a job that must not start is given to start all the same


H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def gpu(tmp_path, monkeypatch) -> None:
    """An 80 GB GPU 0, as a stand-in nvidia-smi on PATH tells it."""
    stand_in_gpu(tmp_path / "bin", monkeypatch, H100)


def stand_in_gpu(folder: Path, monkeypatch, name: str, mib: float = H100_MIB) -> None:
    """GPU 0 as a stand-in nvidia-smi first on PATH tells it: its name, else its memory."""
    smi = folder / "nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text(f"#!/bin/sh\ncase \"$*\" in *name*) printf '0, {name}\\n' ;;\n"
                   f"  *) printf '0, {mib:.0f}\\n' ;;\nesac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def run_args(jobs: int, device: str = "auto", scale: float = 1.0) -> argparse.Namespace:
    return argparse.Namespace(jobs=jobs, device=device, scale=scale)


def measured(needs_mib: list[float]) -> tuple[list[sets.Job], dict]:
    """A wrong version's job for each need, and the kept baseline row of its problem that
    measured it (judge and worker peaks, split at random, plus the contexts)."""
    jobs, kept = [], {}
    for number, need in enumerate(needs_mib):
        name = f"level1/{number}_p"
        jobs.append(sets.Job("kernelbench", name, Path(f"/sets/{number}_p.py"), "wrong",
                             sets.REJECT))
        judge = random.uniform(0.2, 0.8) * (need - CONTEXTS_MIB)
        kept[("kernelbench", name, "baseline")] = sets.Row(
            "kernelbench", name, "baseline", sets.PASS, judge_gpu_mib=judge,
            worker_gpu_mib=need - CONTEXTS_MIB - judge)
    return jobs, kept


class Recorder:
    """The jobs' `one`: each start, with the jobs at work beside it, and (where `held`) the
    job kept at work until the test lets it go."""

    def __init__(self, held: bool = False, seconds: tuple[float, float] = (0.0, 0.0)):
        self.held, self.seconds = held, seconds
        self.started: list[tuple[int, frozenset[int]]] = []
        self.at_work: set[int] = set()
        self._lock = threading.Lock()
        self._go: dict[int, threading.Event] = {}

    def __call__(self, index: int) -> None:
        with self._lock:
            self.started.append((index, frozenset(self.at_work)))
            self.at_work.add(index)
            go = self._go.setdefault(index, threading.Event())
        if self.held:
            go.wait(30)
        else:
            time.sleep(random.uniform(*self.seconds))
        with self._lock:  # before its room is given back
            self.at_work.discard(index)

    def let_go(self, *indices: int) -> None:
        for index in indices:
            with self._lock:
                self._go.setdefault(index, threading.Event()).set()

    def at_work_now(self, expected: set[int]) -> None:
        """Wait for `expected` to be the jobs at work, then that it stays so a while."""
        deadline = time.monotonic() + 10
        while self.at_work != expected and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(SETTLE_S)
        assert self.at_work == expected


def in_background(turns: sets.Turns, at_once: int, one: Recorder) -> threading.Thread:
    thread = threading.Thread(target=turns.run, args=(at_once, one), daemon=True)
    thread.start()
    return thread


def test_jobs_at_once_never_need_more_than_the_gpus_memory(gpu):
    """Many jobs of random needs on an 80 GB GPU, each at work a random while: never more
    than --jobs at once, nor more memory than the GPU has (but one bigger than the GPU,
    alone); every job runs once, and they do share."""
    at_once = random.randint(2, 4)
    needs = [random.uniform(0.05, 1.2) * USABLE for _ in range(random.randint(20, 30))]
    jobs, kept = measured(needs)
    memory = sets.shared_gpu(run_args(at_once), jobs, kept)
    assert memory is not None and memory.total["0"] == pytest.approx(USABLE)
    one = Recorder(seconds=(0.005, 0.05))
    sets.Turns(dict(enumerate(jobs)), memory).run(at_once, one)
    assert sorted(index for index, _ in one.started) == list(range(len(jobs)))
    for index, beside in one.started:
        at_work = [needs[i] for i in beside | {index}]
        assert len(at_work) <= at_once
        assert len(at_work) == 1 or sum(at_work) <= USABLE * (1 + 1e-9), (index, beside)
    assert any(beside for _, beside in one.started)
    assert memory.free("0") == pytest.approx(USABLE)  # all given back


def test_a_job_that_waits_for_room_lets_the_ones_behind_pass_and_starts_first(gpu):
    """Three at once: of two big jobs the second waits for the first, while the small ones
    behind it start beside; once the first ends, the second starts before the later small
    one that waits for a slot."""
    big = [random.uniform(0.55, 0.7) * USABLE for _ in range(2)]
    small = [random.uniform(0.02, 0.1) * USABLE for _ in range(4)]
    jobs, kept = measured(big + small)  # 0, 1 big; 2 to 5 small
    one = Recorder(held=True)
    thread = in_background(sets.Turns(dict(enumerate(jobs)),
                                      sets.shared_gpu(run_args(3), jobs, kept)), 3, one)
    one.at_work_now({0, 2, 3})  # 1 waits for room, 4 and 5 for a slot
    one.let_go(2)
    one.at_work_now({0, 3, 4})  # a slot: still no room for 1
    one.let_go(0)
    one.at_work_now({1, 3, 4})  # room for 1, before 5
    one.let_go(3)
    one.at_work_now({1, 4, 5})
    one.let_go(1, 4, 5)
    thread.join(10)
    assert not thread.is_alive()
    order = [index for index, _ in one.started]  # the first three start at once
    assert set(order[:3]) == {0, 2, 3} and order[3:] == [4, 1, 5]


def test_a_job_bigger_than_the_gpu_runs_alone(gpu):
    huge = random.uniform(1.05, 3) * H100_MIB
    jobs, kept = measured([random.uniform(0.02, 0.2) * USABLE, huge,
                           random.uniform(0.02, 0.2) * USABLE])
    one = Recorder(held=True)
    thread = in_background(sets.Turns(dict(enumerate(jobs)),
                                      sets.shared_gpu(run_args(3), jobs, kept)), 3, one)
    one.at_work_now({0, 2})  # the one behind the huge one passes it
    one.let_go(0)
    one.at_work_now({2})  # not beside a small one
    one.let_go(2)
    one.at_work_now({1})
    one.let_go(1)
    thread.join(10)
    assert not thread.is_alive()


def test_without_a_gpu_the_jobs_run_in_the_plain_pool(gpu, tmp_path, monkeypatch):
    """On the CPU, one at a time, or where nvidia-smi tells no GPU, the needs are not asked:
    --jobs start at once, in order, however big."""
    jobs, kept = measured([random.uniform(0.6, 3) * USABLE for _ in range(5)])
    assert sets.shared_gpu(run_args(3, device="cpu"), jobs, kept) is None
    assert sets.shared_gpu(run_args(1), jobs, kept) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # sees no GPU
    assert sets.shared_gpu(run_args(3), jobs, kept) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    (tmp_path / "none").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "none"))  # no nvidia-smi
    assert sets.shared_gpu(run_args(3), jobs, kept) is None
    one = Recorder(held=True)
    thread = in_background(sets.Turns(dict(enumerate(jobs)), None), 3, one)
    one.at_work_now({0, 1, 2})
    one.let_go(1)
    one.at_work_now({0, 2, 3})
    one.let_go(0, 2, 3, 4)
    thread.join(10)
    order = [index for index, _ in one.started]
    assert set(order[:3]) == {0, 1, 2} and order[3:] == [3, 4]


def level1_sets(tmp_path: Path, names: list[str]) -> Path:
    """A sets folder under tmp_path holding these KernelBench level-1 problems and no GPU
    MODE ones; its level1 folder, where a test may add more."""
    level1 = tmp_path / "sets" / "KernelBench" / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    (tmp_path / "sets" / "reference-kernels" / "problems").mkdir(parents=True)
    for name in names:
        (level1 / f"{name}.py").write_text((KERNELBENCH / f"{name}.py").read_text())
    return level1


def resumed_run(out: Path, *more: str) -> tuple[list[str], dict[str, str]]:
    """The script's command resuming `out` over level 1 of ./sets (scaled: no declared bytes
    to tell, which takes seconds), rung static, each run's own judge; and its env."""
    command = [sys.executable, str(REPO / "benchmarks" / "problem_sets.py"), "run",
               "sets", "--gpumode", "none", "--levels", "1", "--wrong", "0",
               "--rungs", "static", "--no-service", "--out", str(out), "--resume",
               "--scale", "0.5", *more]
    return command, dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))


def test_a_need_is_what_an_earlier_row_measured_else_the_declared_bytes(gpu, tmp_path):
    """A problem an earlier row measured (--resume keeps it) needs what that row measured,
    the most of its rows; a KernelBench problem not measured, its declared bytes (at declared
    sizes only: a scaled run's are smaller); one neither tells, a slot's share; and a row of
    this run teaches its problem's need."""
    rng = random.Random()
    told, told_bytes = kernelbench_problem(tmp_path, "told", rng)
    measured_path, _ = kernelbench_problem(tmp_path, "measured", rng)
    jobs, kept = measured([rng.uniform(0.1, 0.5) * USABLE for _ in range(2)])
    jobs[0].path = jobs[1].path = measured_path  # one problem, two rows
    jobs.append(sets.Job("kernelbench", "level1/told", told, "baseline", sets.PASS))
    jobs.append(sets.Job("gpumode", "pmpp/vectoradd", tmp_path, "baseline", sets.PASS))
    rows = list(kept.values())
    most = max(sets.measured_need_mib(sets.gpu_peaks(row)) for row in rows)
    memory = sets.shared_gpu(run_args(2), jobs, kept)
    assert memory is not None
    assert memory.needs == {str(measured_path): pytest.approx(most),
                            str(told): pytest.approx(
                                DECLARED_FACTOR * told_bytes / 2**20 + CONTEXTS_MIB)}
    assert memory.need("0", str(tmp_path)) == pytest.approx(USABLE / 2)
    scaled = sets.shared_gpu(run_args(2, scale=0.5), jobs, kept)
    assert scaled is not None and scaled.needs == {str(measured_path): pytest.approx(most)}
    # out of memory beside others before: the whole GPU, whatever its bytes or rows said
    crowded = sets.shared_gpu(run_args(2), jobs, kept,
                              frozenset({("kernelbench", "level1/told")}))
    assert crowded is not None and crowded.needs[str(told)] == H100_MIB
    assert crowded.needs[str(measured_path)] == pytest.approx(most)
    turns = sets.Turns({3: jobs[3]}, memory)
    gpu = turns.take(3)
    assert gpu == "0"
    gpu_mode = sets.Row("gpumode", "pmpp/vectoradd", "baseline", sets.PASS,
                        judge_gpu_mib=rng.uniform(100, 9000), worker_gpu_mib=None)
    turns.give_back(3, gpu, gpu_mode)
    assert memory.needs[str(tmp_path)] == pytest.approx(gpu_mode.judge_gpu_mib + CONTEXTS_MIB)


def test_a_resumed_run_shares_the_gpu_by_what_the_earlier_run_measured(gpu, tmp_path):
    """The script itself, on a stand-in GPU (its runs on the CPU): --resume keeps the
    baseline an earlier run measured, whose need is known from then on, runs again the one
    that ran out of memory, beside one not run before; --stop-after still leaves the rest for
    later."""
    names = random.sample(["1_ReLU", "2_RowSoftmax", "3_Linear", "4_LayerNorm"], 3)
    if names[1] < names[2]:  # the one out of memory before comes after the new one's turn
        names[1], names[2] = names[2], names[1]
    level1_sets(tmp_path, names)
    measured_row, out_of_memory = (
        asdict(sets.Row("kernelbench", f"level1/{name}", "baseline", sets.PASS, ok=True,
                        verdict="passed", judge_gpu_mib=random.uniform(0.2, 0.4) * USABLE,
                        worker_gpu_mib=random.uniform(0.1, 0.3) * USABLE))
        for name in names[:2])
    out_of_memory.update(ok=False, verdict="failed", judge_gpu_mib=None, worker_gpu_mib=None,
                         error_type="OutOfMemoryError", explanation="CUDA out of memory.")
    out = tmp_path / "out.json"
    out.write_text(json.dumps([measured_row, out_of_memory]))
    command, env = resumed_run(out, "--jobs", "2")
    later = subprocess.run([*command, "--stop-after", "0.000001"], capture_output=True,
                           text=True, timeout=60, env=env, cwd=tmp_path)
    assert ("2 jobs at once share GPU 0's 81559 MiB: needs measured for 1 problems, declared "
            "for 0, the whole GPU for 1 (out of memory beside others before) and 0 (slow: "
            f"given more than {sets.QUICK_S} s)") \
        in later.stdout, later.stdout + later.stderr
    assert "2 not started (--stop-after" in later.stdout
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = done_rows = {row["problem"]: row for row in json.loads(out.read_text())}
    assert set(rows) == {f"level1/{name}" for name in names}
    assert rows[f"level1/{names[0]}"] == measured_row  # kept
    assert rows[f"level1/{names[1]}"]["verdict"] == "passed"  # run again, alone, first:
    # the new job behind it in turn would otherwise start, and it wait until the run's end
    printed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("[")]
    assert printed == [f"level1/{names[1]}", f"level1/{names[2]}"], done.stdout
    # before the service starts: its idle judges hold a CUDA context each beside a run
    assert done.stdout.index("1 jobs run first, one at a time, with no warm judges beside "
                             "them: 1 that ran out of GPU memory beside others before, 0 whose "
                             "need is more than the GPU holds") \
        < done.stdout.index(f"level1/{names[1]}")
    assert rows[f"level1/{names[1]}"]["notes"].startswith(sets.ALONE)
    assert sets.ALONE not in rows[f"level1/{names[2]}"]["notes"]
    assert rows[f"level1/{names[2]}"]["verdict"] == "passed"
    # --rerun: a kept row whose problem it names runs again (a krung bug fixed since)
    again = subprocess.run([*command, "--rerun", re.escape(names[0])], capture_output=True,
                           text=True, timeout=60, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    rows = {row["problem"]: row for row in json.loads(out.read_text())}
    assert rows[f"level1/{names[0]}"]["run_id"] and rows[f"level1/{names[0]}"] != measured_row
    assert rows[f"level1/{names[1]}"] == done_rows[f"level1/{names[1]}"]  # kept this time


def test_a_job_whose_need_is_more_than_the_gpu_holds_runs_first_alone(gpu, tmp_path):
    """A problem an earlier row measured at more than the GPU holds: its job not run yet
    (here its wrong version) runs first, alone, before the others' turns and the service
    (whose idle judges hold a CUDA context each), and its row says why."""
    names = sorted(random.sample(["1_ReLU", "2_RowSoftmax", "3_Linear", "4_LayerNorm"], 2))
    big = random.randrange(2)
    level1_sets(tmp_path, names)
    kept = [asdict(sets.Row("kernelbench", f"level1/{name}", "baseline", sets.PASS, ok=True,
                            verdict="passed", judge_gpu_mib=random.uniform(0.1, 0.2) * USABLE,
                            worker_gpu_mib=random.uniform(0.05, 0.1) * USABLE))
            for name in names]
    kept[big].update(judge_gpu_mib=random.uniform(0.6, 0.9) * USABLE,
                     worker_gpu_mib=random.uniform(0.5, 0.6) * USABLE)
    out = tmp_path / "out.json"
    out.write_text(json.dumps(kept))
    command, env = resumed_run(out, "--jobs", "2", "--wrong", "1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    said = ("1 jobs run first, one at a time, with no warm judges beside them: 0 that ran out "
            "of GPU memory beside others before, 1 whose need is more than the GPU holds")
    assert said in done.stdout, done.stdout
    printed = [line.split()[1:3] for line in done.stdout.splitlines() if line.startswith("[")]
    assert printed == [[f"level1/{names[big]}", "wrong:"], [f"level1/{names[1 - big]}",
                                                              "wrong:"]], done.stdout
    assert done.stdout.index(said) < done.stdout.index(f"level1/{names[big]} wrong")
    rows = {(row["problem"], row["version"]): row for row in json.loads(out.read_text())}
    assert rows[(f"level1/{names[big]}", "wrong")]["notes"].startswith(
        f"{sets.ALONE} (its need is more than the GPU holds")
    assert sets.ALONE not in rows[(f"level1/{names[1 - big]}", "wrong")]["notes"]
    assert rows[(f"level1/{names[big]}", "baseline")] == kept[big]  # kept, not run again


def test_a_run_cut_short_keeps_every_row_it_did_not_measure_again(tmp_path):
    """--out loses no row: one whose job did not run again this time (a timeout left for a
    later call by --stop-after) stays as it was, and so does a row of a problem outside this
    run's jobs (--only), while the run writes its own."""
    first, timed_out = sorted(random.sample(["1_ReLU", "2_RowSoftmax", "3_Linear"], 2))
    level1_sets(tmp_path, [first, timed_out])
    elsewhere = asdict(sets.Row("gpumode", f"group/p{random.randint(0, 99)}_py", "baseline",
                                sets.PASS, ok=True, verdict="passed",
                                wall_s=random.uniform(1, 9)))
    timeout = asdict(sets.Row("kernelbench", f"level1/{timed_out}", "baseline", sets.PASS,
                              verdict="timeout", wall_s=random.uniform(300, 900),
                              explanation="no answer within 300 s"))
    out = tmp_path / "out.json"
    out.write_text(json.dumps([elsewhere, timeout]))
    # one job at a time: the first runs (seconds), and the timeout's turn comes after 0.5 s
    command, env = resumed_run(out, "--stop-after", "0.5")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 not started" in done.stdout, done.stdout
    rows = {row["problem"]: row for row in json.loads(out.read_text())}
    assert rows == {elsewhere["problem"]: elsewhere, timeout["problem"]: timeout,
                    f"level1/{first}": rows[f"level1/{first}"]}
    assert rows[f"level1/{first}"]["verdict"] == "passed"
    assert list(rows[f"level1/{first}"]["rungs_s"]) == ["static"]  # --rungs static


def test_each_kernelbench_level_has_its_wrong_versions(tmp_path):
    """--wrong N: a wrong version for every Nth problem of a level, and as many as N in a
    level that has N problems or more (KernelBench's level 3 has 50: every 5th)."""
    n = random.choice([5, 10])
    sizes = {"level1": n * n + random.randint(0, n - 1), "level2": n * n // 2,
             "level3": random.randint(1, n - 1)}
    for level, size in sizes.items():
        folder = tmp_path / sets.KERNELBENCH / sets.KERNELBENCH / level
        folder.mkdir(parents=True)
        for number in random.sample(range(1, 500), size):
            (folder / f"{number}_P.py").write_text(f"# problem {number}\n")
    jobs = sets.kernelbench_jobs(tmp_path, list(sizes), tmp_path / "versions", n)
    for level, size in sizes.items():
        ours = [job for job in jobs if job.problem.startswith(f"{level}/")]
        baselines = [job.problem for job in ours if job.version == "baseline"]
        wrong = [job.problem for job in ours if job.version == "wrong"]
        assert len(baselines) == size
        every = n if size >= n * n else max(1, size // n)
        assert wrong == baselines[::every], level
        assert len(wrong) >= min(n, size)
    assert not [j for j in sets.kernelbench_jobs(tmp_path, list(sizes), tmp_path / "v", 0)
                if j.version == "wrong"]


def test_gpumode_folders_for_several_gpus_are_left_out_and_the_wrong_versions_stay(tmp_path):
    """A folder whose task.yml says `multi_gpu: true` has no jobs (krung refuses such a
    problem, and the table is one GPU's) and is named as left out; the other folders keep the
    wrong versions they had with it counted (every Nth over all folders), so the rows of
    earlier runs still match their jobs."""
    n = random.randint(2, 4)
    names = sorted(f"group{random.randint(0, 3)}/p{i}" for i in range(random.randint(8, 14)))
    several = {names[1], *random.sample(names[2:], 2)}  # one early: the counts would differ
    for name in names:
        folder = tmp_path / sets.GPUMODE / "problems" / name
        folder.mkdir(parents=True)
        (folder / "reference.py").write_text("def ref_kernel(data):\n    return data\n")
        flag = random.choice(["true", "True"]) if name in several else random.choice(
            ["false", ""])
        (folder / "task.yml").write_text(f"lang: py\nmulti_gpu: {flag}\ntest_timeout: 180\n")
    jobs = sets.gpumode_jobs(tmp_path, tmp_path / "versions", n)
    assert {job.problem for job in jobs} == set(names) - several
    assert sets.several_gpus(tmp_path) == sorted(several)
    wrong = [job.problem for job in jobs if job.version == "wrong"]
    assert wrong == [name for index, name in enumerate(names)
                     if index % n == 0 and name not in several]


def test_a_slow_gpumode_problem_has_the_gpu_to_itself(gpu, tmp_path):
    """A GPU MODE problem whose authors give a submission more than QUICK_S benchmarks for
    minutes under the GPU's lock: it needs the whole GPU, as one out of memory before does,
    and a quick one a slot's share."""
    slow = sets.Job("gpumode", "linalg/qr_v2", tmp_path / "qr_v2", "baseline", sets.PASS,
                    declared_s=sets.QUICK_S + random.randint(1, 2000))
    quick = sets.Job("gpumode", "pmpp/sort_py", tmp_path / "sort_py", "baseline", sets.PASS,
                     declared_s=random.randint(0, sets.QUICK_S))
    memory = sets.shared_gpu(run_args(3), [slow, quick], {})
    assert memory is not None
    assert memory.need("0", str(slow.path)) == H100_MIB
    assert memory.need("0", str(quick.path)) == pytest.approx(USABLE / 3)
    turns = sets.Turns({0: slow, 1: quick}, memory)
    assert turns.take(0) == "0" and turns.take(1) is None  # nothing beside it
    turns.give_back(0, "0", None)
    assert turns.take(1) == "0" and turns.take(0) is None  # nor it beside anything


def test_a_timeout_names_the_rung_it_was_killed_in():
    """The next rung of the run's ladder after those its store recorded; where that rung
    waits for the GPU to itself, the row says so (its time may have gone on waiting)."""
    ladder = list(sets.krung.select_rungs(None))
    cut = random.randrange(len(ladder))
    said = sets._killed_in(sets.DEFAULT_RUNGS, set(ladder[:cut]))
    assert said.startswith(f"; killed in {ladder[cut]}")
    assert ("waits for the GPU to itself" in said) == sets.specs()[ladder[cut]].exclusive_gpu
    assert "waits for the GPU" in sets._killed_in(sets.DEFAULT_RUNGS,
                                                  set(ladder) - {"benchmark"})
    assert sets._killed_in("static,correctness", {"static"}) == "; killed in correctness"
    assert sets._killed_in("static", {"static"}) == ""


def test_a_run_stopped_at_its_timeout_keeps_the_rungs_it_finished_and_where_it_was(tmp_path):
    """A real run stopped at the script's timeout (the version's forward never returns; the
    problem's own, the reference, does): its row keeps the rungs it finished, with their
    seconds, from what `krung run --json` printed when told to stop, and names the rung it
    was in, in krung's own words too."""
    hangs = f"{random.randint(90, 99)}_Hangs"
    level1 = level1_sets(tmp_path, [])
    (level1 / f"{hangs}.py").write_text(
        "import time\nfrom pathlib import Path\n\nimport torch\n\n\n"
        "class Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        if 'KernelBench' not in Path(__file__).parts:  # the version's copy\n"
        "            time.sleep(600)\n        return x * 2\n\n\n"
        f"def get_inputs():\n    return [torch.randn({random.randint(8, 64)})]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    out = tmp_path / "out.json"
    # 15 s: after a cold judge's static rung on a loaded machine too
    command, env = resumed_run(out, "--rungs", "static,run", "--timeout", "15",
                               "--kernelbench-check", "none")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads(out.read_text())
    assert row["verdict"] == "timeout" and row["run_id"], row
    assert list(row["rungs_s"]) == ["static"] and row["rungs_s"]["static"] >= 0
    assert "rungs finished before: static" in row["explanation"], row["explanation"]
    assert "killed in run; krung said it was " in row["explanation"], row["explanation"]
    assert "run" in row["explanation"].split("krung said it was ")[1]


def test_a_timeout_says_whether_the_gpus_lock_was_held_and_how_many_waited(tmp_path):
    """krung's GPU lock held here, real evaluations' stand-ins waiting for it in processes of
    their own: /proc/locks tells both; another file's flock is not krung's lock."""
    lock = tmp_path / gpu_lock.NAME.format(f"GPU-{random.randint(0, 9999)}")
    other = tmp_path / "other.lock"
    for path in (lock, other):
        path.touch()
    assert sets.gpu_lock_state(tmp_path) == ""
    holder = os.open(lock, os.O_RDONLY)
    elsewhere = os.open(other, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    fcntl.flock(elsewhere, fcntl.LOCK_EX)
    waiters = [subprocess.Popen([sys.executable, "-c",
                                 "import fcntl, os, sys\n"
                                 "fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX)",
                                 str(lock)]) for _ in range(random.randint(1, 3))]
    try:
        said = f"the GPU's lock was held and {len(waiters)} evaluation"
        deadline = time.monotonic() + 10
        while said not in sets.gpu_lock_state(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said in sets.gpu_lock_state(tmp_path)
    finally:
        for waiter in waiters:
            waiter.kill()
            waiter.wait()
        os.close(holder)
    assert sets.gpu_lock_state(tmp_path) == ""  # the other file's flock is still held
    os.close(elsewhere)


def test_on_the_preferred_card_the_rows_from_other_cards_run_again_after_the_new_ones(
        gpu, tmp_path, monkeypatch):
    """A row names its card. --prefer-card: a resumed run on a card it names runs the rows
    kept from other cards (or from no card told) again, after the jobs not run yet, and keeps
    its own card's; on another card it keeps them all. The table counts the rows per card."""
    names = random.sample(["1_ReLU", "2_RowSoftmax", "3_Linear", "4_LayerNorm",
                           "5_CrossEntropy"], 5)
    level1 = level1_sets(tmp_path, names[:4])  # the fifth comes later
    h200 = f"NVIDIA H200 {random.randint(100, 999)}"
    kept = [asdict(sets.Row("kernelbench", f"level1/{name}", "baseline", sets.PASS, ok=True,
                            verdict="passed", wall_s=random.uniform(1, 9), card=card))
            for name, card in zip(names[:3], [h200, H100, ""], strict=True)]
    out = tmp_path / "out.json"
    out.write_text(json.dumps(kept))
    command, env = resumed_run(out, "--prefer-card", "H200")
    on_h100 = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env,
                             cwd=tmp_path)
    assert on_h100.returncode == 0, on_h100.stdout + on_h100.stderr
    rows = {row["problem"]: row for row in json.loads(out.read_text())}
    assert [rows[f"level1/{name}"] for name in names[:3]] == kept  # another card: all kept
    assert rows[f"level1/{names[3]}"]["card"] == H100
    (level1 / f"{names[4]}.py").write_text((KERNELBENCH / f"{names[4]}.py").read_text())
    stand_in_gpu(tmp_path / "h200", monkeypatch, h200)
    env["PATH"] = os.environ["PATH"]
    on_h200 = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env,
                             cwd=tmp_path)
    assert on_h200.returncode == 0, on_h200.stdout + on_h200.stderr
    assert f"3 rows kept from other cards run again on {h200}" in on_h200.stdout
    printed = [line.split()[1] for line in on_h200.stdout.splitlines() if line.startswith("[")]
    assert printed[0] == f"level1/{names[4]}", on_h200.stdout  # not run yet, first
    assert sorted(printed[1:]) == sorted(f"level1/{name}" for name in names[1:4])
    rows = [sets.Row(**row) for row in json.loads(out.read_text())]
    assert {row.card for row in rows} == {h200}
    assert next(row for row in rows if row.problem == f"level1/{names[0]}") \
        == sets.Row(**kept[0])
    table = sets.markdown([*rows, sets.Row(**kept[1])], argparse.Namespace(
        device="cuda", scale=0.5, rungs="static", service=False))
    assert f"Cards: {h200} 5 rows; {H100} 1 row." in table
    assert table.splitlines()[-1].endswith(f"| {H100} |")  # mixed: each row names its card


def another_contract(folder: Path) -> str:
    """krung's own words on a GPU MODE folder whose reference.py is not GPU MODE's contract
    (princeton/cross_entropy_py: its eval.py calls the submission's functions by name)."""
    from krung.judge.problem import load_problem
    from krung.protocol.errors import ProblemError

    (folder / "task.yml").write_text('files:\n  - {"name": "eval.py", "source": "eval.py"}\n'
                                     'lang: "py"\ntests:\n  - {"vocab_size": 32000}\n'
                                     'benchmarks:\n  - {"vocab_size": 32000}\n')
    (folder / "reference.py").write_text("def generate_inputs(batch_size, vocab_size):\n"
                                         "    return batch_size, vocab_size\n")
    with pytest.raises(ProblemError) as raised:
        load_problem(folder)
    return f"ProblemError: {raised.value}"


def test_every_failure_has_its_cause_or_is_counted_not_yet_explained(tmp_path):
    package = random.choice(["aiter", "flashinfer", "deep_gemm"])
    size = random.randint(2, 40)
    failures = {
        f"No module named '{package}'": f"not installed: {package}",
        "generate_input raised RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when":
            "Blackwell",
        "generate_input takes a `rank`: a multi-GPU problem": "multi-GPU",
        "NondeterministicReference: 2/2 test cases fail; the reference itself is "
        "nondeterministic: every call draws from torch's global random generator":
            "draws from torch's random generator",
        f"NondeterministicReference: 2/2 test cases fail; the reference itself is "
        f"nondeterministic: run twice on the same inputs, its output 0 differs in "
        f"{size}/276889600 elements": f"differ in {size} of 276889600 elements (rounding",
        f"CUDA out of memory. Tried to allocate {size}.00 GiB": "beside other processes",
        f"the worker's output {size} is wrong somewhere new": None,
    }
    rows = [sets.Row("gpumode", "group/p_py", "baseline", sets.PASS, verdict="failed",
                     explanation=text) for text in failures]
    rows.append(sets.Row("gpumode", "princeton/p_py", "baseline", sets.PASS,
                         verdict="problem-error", explanation=another_contract(tmp_path)))
    failures["another contract"] = "not GPU MODE's problem contract"
    rows.append(sets.Row("gpumode", "group/q_py", "baseline", sets.PASS, ok=True,
                         verdict="passed"))
    for row, words in zip(rows, [*failures.values(), None], strict=True):
        assert (words in sets.cause(row)) if words else sets.cause(row) == "", row
    dropout = sets.Row("kernelbench", "level2/66_Matmul_Dropout_Softmax", "baseline",
                       sets.PASS, verdict="failed", explanation="NondeterministicReference: "
                       "2/2 test cases fail; ... its output 0 differs in 9/9 elements")
    assert "dropout in training mode" in sets.cause(dropout)
    alone = sets.Row("kernelbench", "level1/9_p", "baseline", sets.PASS, verdict="error",
                     explanation="CUDA out of memory", notes=sets.ALONE)
    assert sets.cause(alone).endswith("alone on the GPU")
    args = argparse.Namespace(device="cuda", scale=1.0, rungs="default", service=True,
                              kernelbench_check="failed")
    seconds = {"correctness": random.uniform(1, 50), "benchmark": random.uniform(60, 300)}
    rows[-1].rungs_s, rows[-1].commit = seconds, "abc1234"
    table = sets.markdown([*rows, alone], args)
    assert "Not met: 9 rows, 8 of them with a known cause; 1 not yet explained (group/p_py)" \
        in table
    assert table.count("**not yet explained**") == 1
    assert f"| benchmark {seconds['benchmark']:g} |" in table  # where its time went
    assert "krung at: not told 9 rows; abc1234 1 row." in table


def test_a_row_says_when_krungs_first_try_failed():
    """A run that passed on its second try (krung's judge failed first: out of memory beside
    other problems, a crash) says so in its row: the verdict alone would hide it."""
    said = f"krung failed in the run rung, not the version: OutOfMemoryError: {random.random()}"
    run = {"run_id": "r1", "outcome": "passed", "ok": True, "error": None,
           "env": {"first_try": {"error": said, "rungs_done": ["static", "compile", "run"]}},
           "rungs": [{"name": "static", "status": "ok", "figures": {}}]}
    row = sets.Row("kernelbench", "level1/1_p", "baseline", sets.PASS)
    sets._read_outcome(row, 0, json.dumps(run), "")
    assert f"krung's first try failed: {said}" in row.notes


def test_a_row_says_when_the_judges_cache_kept_memory_it_could_not_hand_back():
    pinned = random.uniform(1, 4) * sets.PINNED_NOTE_MIB
    for kept, noted in ((pinned, True), (sets.PINNED_NOTE_MIB * random.random(), False)):
        run = {"run_id": "r1", "outcome": "passed", "ok": True, "error": None,
               "env": {"judge_device_pinned_mib": kept},
               "rungs": [{"name": "static", "status": "ok", "figures": {}}]}
        row = sets.Row("kernelbench", "level1/1_p", "baseline", sets.PASS)
        sets._read_outcome(row, 0, json.dumps(run), "")
        assert (f"the judge's cache kept {kept:.0f} MiB free" in row.notes) == noted, row.notes


def test_the_jobs_to_run_keep_the_running_order():
    """Of hundreds of jobs (the sets have 356), those with no row kept run in the sets'
    running order, then those whose kept rows are from other cards, in that order too: never
    a set's order, which for indices past its table's size is not theirs."""
    count = random.randint(200, 400)
    jobs = [sets.Job("kernelbench", f"level1/{i}_p", Path(f"{i}_p.py"), "baseline", sets.PASS,
                     Path(f"{i}_v.py")) for i in range(count)]
    kept_at = set(random.sample(range(count), random.randint(20, count - 20)))
    kept = {sets._key(jobs[i]): sets.Row("kernelbench", jobs[i].problem, "baseline", sets.PASS)
            for i in kept_at}
    again_at = set(random.sample(sorted(kept_at), random.randint(1, len(kept_at) - 1)))
    order = sets.turn_order(jobs, kept, {sets._key(jobs[i]) for i in again_at})
    new = sorted(set(range(count)) - kept_at)
    assert order == new + sorted(again_at)
    # indices whose set iterates out of order ({10, 33, 150}: 33 first)
    kept = {sets._key(job): sets.Row("kernelbench", job.problem, "baseline", sets.PASS)
            for i, job in enumerate(jobs) if i not in (10, 33, 150)}
    assert list({10, 33, 150}) != [10, 33, 150]
    assert sets.turn_order(jobs, kept, set()) == [10, 33, 150]


def test_a_row_says_where_its_judge_came_from_and_the_table_where_the_time_went(tmp_path):
    """Through a real krung service: each row names its judge's origin as the service's log
    tells it (warm and ready, or handed out while it still started), and the table sums the
    rows' time outside their rungs by that origin: where half a GPU run's wall time went."""
    names = random.sample(["1_ReLU", "2_RowSoftmax", "3_Linear", "4_LayerNorm"], 2)
    level1_sets(tmp_path, names)
    out, markdown = tmp_path / "out.json", tmp_path / "out.md"
    command, env = resumed_run(out, "--markdown", str(markdown))
    command.remove("--no-service")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [sets.Row(**row) for row in json.loads(out.read_text())]
    assert len(rows) == 2 and all(row.ok for row in rows), rows
    assert all(row.judge in ("service (ready)", "service (starting)") for row in rows), rows
    # and where the judge's time before the first rung went, step by step
    steps = ["version_read", "device", "problem_load", "problem_setup", "behaviour_check"]
    for row in rows:
        before = row.extra["before_rungs_s"]
        assert list(before) == steps and all(s >= 0 for s in before.values()), before
        assert sum(before.values()) < row.wall_s
    table = markdown.read_text()
    assert "Wall time of the 2 finished runs: " in table, table
    assert "by where the judge came from: service (" in table, table
    assert "the judges' steps before the first rung, summed: " in table, table


def test_a_judges_origin_is_read_from_the_run_and_the_services_log(tmp_path):
    from krung.host import service

    store = tmp_path / "krung.db"
    log = service.paths(store)[2] / "service.log"
    log.parent.mkdir()
    ready, starting, unsaid = random.sample(range(1000, 99999), 3)
    log.write_text(f"judge {ready} handed out (starting)\njudge {ready} exited with status "
                   f"0\njudge {starting} handed out (starting)\njudge {starting} exited with "
                   f"status 0\njudge {ready} handed out (ready)\n")  # a pid come round
    handed = service.handed_out(store)

    def run(origin: str, pid: int) -> str:
        return json.dumps({"rungs": [], "env": {"judge": origin, "judge_pid": pid}})

    assert sets.judge_origin(run("service", ready), handed) == "service (ready)"
    assert sets.judge_origin(run("service", starting), handed) == "service (starting)"
    assert sets.judge_origin(run("service", unsaid), handed) == "service"
    assert service.handed_out(tmp_path / "none" / "krung.db") == []  # no service, no log
    assert sets.judge_origin(run("service", ready), []) == "service"
    assert sets.judge_origin(run("cold", ready), handed) == "cold"
    assert sets.judge_origin("not json", handed) == ""
