"""A GPU shared by a suite's slots: jobs start only where their problem's memory fits beside
the jobs at work (krung.host.scale.gpu_memory), the needs told by the problem's declared bytes
(krung.judge.problem.footprint) or by what its runs measured (the store)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from krung.host.scale import Job
from krung.host.scale.gpu_memory import (
    CONTEXTS_MIB,
    DECLARED_FACTOR,
    HEADROOM,
    GpuMemory,
    declared_needs_mib,
)
from krung.host.scale.local import problem_needs
from krung.host.store import Store
from krung.judge.problem.footprint import DESCRIBE_S, declared_bytes
from krung.protocol.results import Run
from krung.protocol.settings import Settings

KERNELBENCH_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, {out_features})

    def forward(self, x, y):
        return self.linear(x) + y.sum()

batch = {batch}
features = {features}

def get_inputs():
    return [torch.rand(batch, features), torch.rand({extra})]

def get_init_inputs():
    return [features]
"""


def kernelbench_problem(tmp_path: Path, name: str, rng: random.Random) -> tuple[Path, int]:
    """A problem of random sizes, and its bytes worked out by hand: inputs, weights, output."""
    batch, features, out, extra = (rng.randint(2, 900) for _ in range(4))
    path = tmp_path / f"{name}.py"
    path.write_text(KERNELBENCH_PROBLEM.format(batch=batch, features=features,
                                               out_features=out, extra=extra))
    inputs = 4 * (batch * features + extra)
    weights = 4 * (features * out + out)
    return path, inputs + weights + 4 * batch * out


def test_a_kernelbench_problems_declared_bytes_are_told_without_allocating_them(tmp_path):
    rng = random.Random()
    path, expected = kernelbench_problem(tmp_path, "linear", rng)
    assert declared_bytes(path) == expected
    # As declared, 96 GiB of input: described on the meta device, never drawn.
    huge = tmp_path / "huge.py"
    huge.write_text(KERNELBENCH_PROBLEM.format(batch=1 << 17, features=1 << 16,
                                               out_features=4, extra=3))
    assert declared_bytes(huge) > 32 << 30
    # Another format, or a get_inputs() the meta device cannot run, is not told.
    (tmp_path / "native").mkdir()
    assert declared_bytes(tmp_path / "native") is None
    cpu_only = tmp_path / "cpu_only.py"
    cpu_only.write_text(KERNELBENCH_PROBLEM.format(batch=4, features=8, out_features=2,
                                                   extra=3)
                        .replace("torch.rand(batch, features)",
                                 "torch.rand(batch, features, device='cpu')"))
    assert declared_bytes(cpu_only) is None
    # The suite's own process asks a process of its own (it does not import torch).
    needs = declared_needs_mib([str(path), str(cpu_only)])
    assert list(needs) == [str(path)]
    assert needs[str(path)] == pytest.approx(DECLARED_FACTOR * expected / 2**20 + CONTEXTS_MIB)


def test_a_problem_that_prints_or_takes_too_long_spoils_no_other_estimate(tmp_path):
    """The problems' own prints go to stderr (one even says `{` without a newline), and one
    whose import sleeps past the limit on a description is left out: the rest are told."""
    rng = random.Random()
    first, first_bytes = kernelbench_problem(tmp_path, "first", rng)
    talker, talker_bytes = kernelbench_problem(tmp_path, "talker", rng)
    source = talker.read_text().replace("class Model", 'print("importing")\nclass Model')
    source = source.replace("        return self.linear(x)",
                            '        print("{", end="")\n        return self.linear(x)')
    talker.write_text(source.replace("def get_inputs():\n",
                                     "def get_inputs():\n    print(123)\n"))
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(f"import time\ntime.sleep({10 * DESCRIBE_S})\n"
                       + first.read_text())
    last, last_bytes = kernelbench_problem(tmp_path, "last", rng)
    start = time.monotonic()
    needs = declared_needs_mib([str(p) for p in (first, talker, sleeper, last)])
    assert time.monotonic() - start < 5 * DESCRIBE_S
    assert needs == {str(path): pytest.approx(DECLARED_FACTOR * size / 2**20 + CONTEXTS_MIB)
                     for path, size in ((first, first_bytes), (talker, talker_bytes),
                                        (last, last_bytes))}


def test_a_batch_that_runs_out_of_time_keeps_the_problems_told_before(tmp_path):
    """A problem that swallows the limit on its description holds the batch up until its
    time is out: the problem told before it keeps its estimate."""
    first, first_bytes = kernelbench_problem(tmp_path, "first", random.Random())
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text("import time\nwhile True:\n    try:\n        time.sleep(60)\n"
                        "    except BaseException:\n        pass\n")
    # The first is told in about 4 s (torch's import most of it), twice that on a busy machine.
    needs = declared_needs_mib([str(first), str(stubborn)], timeout_s=12)
    assert needs == {
        str(first): pytest.approx(DECLARED_FACTOR * first_bytes / 2**20 + CONTEXTS_MIB)}


def test_a_small_job_starts_beside_a_big_one_that_waits_on_one_gpu():
    total = random.uniform(60_000, 140_000)
    big, small = "big.py", "small.py"
    memory = GpuMemory({"0": total}, per_gpu=3,
                       needs={big: random.uniform(0.51, 0.9) * total * HEADROOM,
                              small: random.uniform(0.01, 0.09) * total * HEADROOM})
    assert memory.need("0", "unknown.py") == pytest.approx(memory.total["0"] / 3)
    assert memory.take(big) == "0"
    assert memory.take(big) is None  # a second big one waits for the first
    assert memory.take(small) == "0"  # a small one fits beside it
    memory.give_back("0", big, {})
    assert memory.take(big) == "0"
    memory.give_back("0", big, {})
    memory.give_back("0", small, {})
    assert memory.free("0") == pytest.approx(memory.total["0"])  # all given back


def test_a_job_takes_a_gpu_with_a_free_slot_and_room_the_most_free_first():
    """Two GPUs of random sizes, two slots each, a big job on each: a third big one waits,
    while small ones start beside them, the first where most is free, the next where a
    slot is left; the waiting one takes the GPU that makes room for it."""
    sizes = {"0": random.uniform(40_000, 140_000)}
    sizes["1"] = sizes["0"] * random.choice([random.uniform(0.5, 0.95), random.uniform(1.05, 2)])
    larger, smaller = sorted(sizes, key=sizes.get, reverse=True)
    memory = GpuMemory(sizes, per_gpu=2)
    least = memory.total[smaller]
    memory.needs = {"for larger.py": 0.8 * memory.total[larger], "for smaller.py": 0.8 * least,
                    "big.py": random.uniform(0.6, 0.7) * least,
                    "small.py": random.uniform(0.01, 0.09) * least}
    assert memory.take("for larger.py") == larger  # both empty: the most free
    assert memory.take("for smaller.py") == smaller  # no room beside the first
    assert memory.take("big.py") is None
    assert memory.take("small.py") == larger  # 20% of the larger is free, more than 20% of
    assert memory.take("small.py") == smaller  # the smaller, whose slot is the one left
    assert memory.take("small.py") is None  # every slot taken
    making_room = random.choice(["for larger.py", "for smaller.py"])
    gpu = larger if making_room == "for larger.py" else smaller
    memory.give_back(gpu, making_room, {})
    assert memory.take("big.py") == gpu


def test_jobs_at_once_never_exceed_a_gpus_slots_nor_its_memory():
    """Many jobs of random needs on two GPUs of random sizes, ending in random order: on each
    GPU never more jobs than its slots, nor more memory than it has (but a job bigger than
    the GPU, alone); every job runs, and every GPU is given back whole."""
    rng = random.Random()
    sizes = {gpu: rng.uniform(40_000, 140_000) for gpu in ("0", "1")}
    per_gpu = rng.randint(2, 4)
    memory = GpuMemory(sizes, per_gpu=per_gpu)
    waiting = [f"p{i}.py" for i in range(rng.randint(20, 40))]
    memory.needs = {p: rng.uniform(0.05, 1.2) * min(memory.total.values()) for p in waiting}
    at_work: list[tuple[str, str]] = []
    most_at_once = 0
    while waiting or at_work:
        for problem in list(waiting):
            gpu = memory.take(problem)
            if gpu is not None:
                waiting.remove(problem)
                at_work.append((gpu, problem))
        assert at_work  # an empty GPU takes any job
        for gpu in sizes:
            mine = [memory.needs[p] for g, p in at_work if g == gpu]
            assert len(mine) <= per_gpu and (len(mine) == 1 or sum(mine) <= memory.total[gpu])
            most_at_once = max(most_at_once, len(mine))
        gpu, problem = at_work.pop(rng.randrange(len(at_work)))
        memory.give_back(gpu, problem, {})
    assert most_at_once > 1  # they did share
    assert all(memory.free(gpu) == pytest.approx(memory.total[gpu]) for gpu in sizes)


def test_a_job_bigger_than_a_gpu_runs_alone_on_it_and_a_run_teaches_its_need():
    total = random.uniform(60_000, 140_000)
    memory = GpuMemory({"0": total}, per_gpu=2,
                       needs={"whole.py": random.uniform(1.01, 3) * total,
                              "half.py": 0.5 * total * HEADROOM})
    assert memory.take("half.py") == "0"
    assert memory.take("whole.py") is None
    memory.give_back("0", "half.py", {})
    assert memory.take("whole.py") == "0"  # on the empty GPU
    assert memory.take("half.py") is None  # nothing beside it
    measured = {"judge_device_peak_mib": 0.3 * total, "worker_device_peak_mib": 0.3 * total}
    memory.give_back("0", "whole.py", measured)  # less than believed: the most is kept
    assert memory.needs["whole.py"] > total
    assert memory.take("half.py") == "0"
    memory.give_back("0", "half.py", measured)  # more than believed: learnt
    assert memory.needs["half.py"] == pytest.approx(0.6 * total + CONTEXTS_MIB)
    assert memory.take("half.py") == "0" and memory.take("half.py") is None  # no longer two


def test_a_problems_need_is_what_its_runs_measured_else_its_declared_bytes(tmp_path):
    rng = random.Random()
    measured_path, _ = kernelbench_problem(tmp_path, "measured", rng)
    declared_path, expected = kernelbench_problem(tmp_path, "declared", rng)
    store_path = tmp_path / "krung.db"
    store = Store(store_path)
    judge, worker = rng.uniform(100, 20_000), rng.uniform(100, 20_000)
    for name, peaks in (
            ("measured", {"judge_device_peak_mib": judge, "worker_device_peak_mib": worker}),
            ("measured", {"judge_device_peak_mib": judge / 2, "worker_device_peak_mib": 1.0}),
            ("measured", {}),  # a CPU run measures none
            # at a tenth of the sizes: another problem's memory, under its own name
            ("measured@scale0.1", {"judge_device_peak_mib": 7.0, "worker_device_peak_mib": 5.0}),
            ("measured@bf16", {"judge_device_peak_mib": 9e9, "worker_device_peak_mib": 1.0})):
        run = Run(run_id="", problem=name, problem_path=str(measured_path),
                  solution="v.py", source_sha256="0" * 64, source="", seed=1, env=peaks)
        store.begin(run, ["static"])
        store.finish(run)
    store.close()
    scaled = Settings.from_env().replace(store=store_path, scale=0.1)
    assert problem_needs(scaled, [Job(str(measured_path), "v.py")]) == {
        str(measured_path): pytest.approx(12.0 + CONTEXTS_MIB)}
    settings = Settings.from_env().replace(store=store_path, scale=1.0)
    jobs = [Job(str(measured_path), "v.py"), Job(str(declared_path), "v.py"),
            Job(str(tmp_path / "missing.py"), "v.py")]
    needs = problem_needs(settings, jobs)
    assert needs == {
        str(measured_path): pytest.approx(judge + worker + CONTEXTS_MIB),
        str(declared_path): pytest.approx(DECLARED_FACTOR * expected / 2**20 + CONTEXTS_MIB)}
    memory = GpuMemory({"0": 80_000.0}, per_gpu=2, needs=needs)
    memory.give_back(memory.take(str(declared_path)), str(declared_path),
                     {"judge_device_peak_mib": 1.0e5, "worker_device_peak_mib": 1.0})
    assert memory.needs[str(declared_path)] == pytest.approx(1.0e5 + 1.0 + CONTEXTS_MIB)
