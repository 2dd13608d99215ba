"""Checked cases sized to a CPU's time budget (krung.judge.problem.cpu_budget)."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import time

import pytest

import krung
from krung.judge.problem import case_size
from krung.judge.problem.cpu_budget import FLOOR, CallCost, CostModel, cpu_seconds, shrink
from krung.protocol.settings import Settings
from tests.conftest import PROBLEMS


def _class(size: int) -> str:
    return "one" if size == 1 else "x16" if size % 16 == 0 else "other"


def test_shrinking_keeps_triton_classes_and_the_innermost_block_where_it_fits():
    rng = random.Random()
    for _ in range(200):
        case = {"rows": rng.choice([1, 16 * rng.randint(1, 512), rng.randint(2, 9000)]),
                "cols": rng.choice([16 * rng.randint(1, 4096), rng.randint(2, 70000)]),
                "dtype": "float32"}
        limit = rng.randint(64, 1 << 20)
        smaller = shrink(case, lambda c, limit=limit: case_size(c) <= limit,
                         keep_block=True)
        assert smaller["dtype"] == "float32"
        for key in ("rows", "cols"):
            assert smaller[key] <= case[key]
            if smaller[key] > 3:  # the smallest sizes are as small as halving goes
                assert _class(smaller[key]) == _class(case[key]), (case, smaller)
        # the innermost size keeps its power of two (the same BLOCK)
        assert (smaller["cols"] - 1).bit_length() == (case["cols"] - 1).bit_length()
        if case_size(case) <= limit:
            assert smaller == case
        elif smaller["cols"] < case["cols"]:  # outer sizes went first, as far as they go
            assert smaller["rows"] <= 16


def test_shrinking_without_the_block_reaches_the_budget_down_to_the_floor():
    rng = random.Random()
    for _ in range(100):
        case = {"n": rng.randint(5000, 10 ** 7), "dtype": "bfloat16"}
        limit = rng.randint(FLOOR + 1, 40000)
        smaller = shrink(case, lambda c, limit=limit: case_size(c) <= limit)
        assert case_size(smaller) <= limit
        assert _class(smaller["n"]) == _class(case["n"])
        # a budget below the floor gets the floor: 2048 for a multiple of 16, else 2049
        low = rng.randint(1, FLOOR - 1)
        floored = shrink(case, lambda c, low=low: case_size(c) <= low)
        assert floored["n"] == (FLOOR if case["n"] % 16 == 0 else FLOOR + 1), (case, floored)


def test_no_budget_shrinks_a_case_to_one_program():
    """However small the budget, a case keeps an innermost size and a product of sizes of at
    least FLOOR (or as declared): a grid rounded down, with a block of 256 to 2048, misses
    elements of every case whose innermost size is not a multiple of 16."""
    rng = random.Random()
    for _ in range(300):
        sizes = [rng.choice([1, 16 * rng.randint(1, 600), rng.randint(2, 9000)])
                 for _ in range(rng.randint(0, 2))]
        sizes.append(rng.choice([16 * rng.randint(1, 4096), rng.randint(2, 70000)]))
        case = {**{f"d{i}": v for i, v in enumerate(sizes)}, "dtype": "float16"}
        inner = f"d{len(sizes) - 1}"
        smallest = shrink(case, lambda c: False, keep_block=rng.random() < 0.5)
        assert smallest["dtype"] == "float16"
        assert smallest[inner] >= min(case[inner], FLOOR), (case, smallest)
        assert case_size(smallest) >= min(case_size(case), FLOOR), (case, smallest)
        for key, size in smallest.items():
            if key != "dtype" and size != case[key]:
                assert _class(size) == _class(case[key]) and size >= 3, (case, smallest)
        if case[inner] > FLOOR and case[inner] % 16:
            for block in (256, 512, 1024, 2048):
                assert smallest[inner] // block * block < smallest[inner]
                assert math.ceil(smallest[inner] / block) >= 2


def test_the_floor_lets_the_outer_sizes_go_only_as_far_as_it_allows():
    """An innermost size at or below the floor stays; the outer ones shrink until the next
    step would take the product below the floor (or to the smallest of their class)."""
    rng = random.Random()
    cols = rng.choice([7, 129, 1000, 2 * rng.randint(50, 999) + 1])
    least_rows = 4 * FLOOR // cols + 1  # a product of more than four times the floor
    rows = rng.choice([rng.randint(least_rows, least_rows + 500),
                       16 * rng.randint(least_rows // 16 + 1, least_rows // 16 + 40)])
    smallest = shrink({"rows": rows, "cols": cols}, lambda c: False)
    assert smallest["cols"] == cols
    assert FLOOR <= smallest["rows"] * cols < 2 * FLOOR + 32 * cols or smallest["rows"] in (3, 16)
    assert _class(smallest["rows"]) == _class(rows)
    # a budget that fits something above the floor is still met
    limit = rng.randint(FLOOR, rows * cols - 1)
    fitted = shrink({"rows": rows, "cols": cols}, lambda c: case_size(c) <= limit)
    assert FLOOR <= case_size(fitted) <= limit or fitted == smallest


def test_the_cost_model_learns_programs_and_elements_from_the_calls_it_sees():
    """Calls timed as the interpreter times them (per call, per program, per element, with
    noise): wide rows are predicted from narrow ones and the other way round."""
    rng = random.Random()
    a, b, c = rng.uniform(0.005, 0.03), rng.uniform(0.002, 0.01), rng.uniform(1e-7, 1e-6)
    model = CostModel()
    for _ in range(12):
        rows, cols = rng.randint(1, 64), rng.randint(1, 20000)
        model.note({"rows": rows, "cols": cols}, (a + b * rows + c * rows * cols)
                   * rng.uniform(0.9, 1.1))
    for rows, cols in ((3, 32768), (97, 100), (16, 8192)):
        truth = a + b * rows + c * rows * cols
        # 10% noise on 12 calls spanning up to 64 rows: within [0.6, 3] of the truth in all
        # but about 1 in 10^4 draws (20 times rarer than with absolute errors)
        assert 0.6 * truth <= model.predict({"rows": rows, "cols": cols}) <= 3.0 * truth


def test_calls_that_cost_the_same_at_every_size_do_not_make_a_huge_case_look_free():
    """Small cases' calls whose cost is all per call, the larger ones a little cheaper by
    chance: the fit says nothing grows with size, yet a case of 10^10 elements is not
    predicted to fit a budget (a 4096^3 matmul bench case was checked whole, and ran for
    minutes)."""
    rng = random.Random()
    model = CostModel()
    base = rng.uniform(0.02, 0.05)
    for _ in range(10):
        m, n, k = rng.randint(1, 16), rng.randint(1, 16), rng.randint(1, 1100)
        model.note({"M": m, "N": n, "K": k},
                   base * (1 - 0.3 * m * n * k / (16 * 16 * 1100)) * rng.uniform(0.99, 1.01))
    assert model.predict({"M": 4096, "N": 4096, "K": 4096}) > 60
    assert model.predict({"M": 16, "N": 16, "K": 64}) < 2 * base


# A child that waits for a line, spends `seconds` (burning CPU, part of it in a thread that
# has ended by then, or asleep), then says so and waits to be told to exit.
CHILD = """
import sys, threading, time
seconds, how = float(sys.argv[1]), sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()
def burn(s):
    end = time.thread_time() + s
    while time.thread_time() < end:
        pass
if how == "burn":
    helper = threading.Thread(target=burn, args=(seconds / 2,))
    helper.start()
    helper.join()
    burn(seconds / 2)
else:
    time.sleep(seconds)
print("done", flush=True)
sys.stdin.readline()
"""


def _cost(seconds: float, how: str) -> tuple[float, float]:
    """What a child's spending `seconds` `how` cost it (CallCost), and the wall time."""
    with subprocess.Popen([sys.executable, "-c", CHILD, str(seconds), how],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout.readline() == "ready\n"
        cost, wall = CallCost(child.pid), time.perf_counter()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        return cost.seconds(), time.perf_counter() - wall


def test_a_calls_cost_is_the_processes_cpu_time_with_ended_threads_not_the_wall_time():
    seconds = random.uniform(0.25, 0.35)
    burnt, _ = _cost(seconds, "burn")
    assert seconds * 0.95 <= burnt <= seconds + 0.1  # half of it in a thread now ended
    slept, wall = _cost(seconds, "sleep")
    assert wall >= seconds
    assert 0 <= slept < 0.05


def test_without_a_process_to_read_the_cost_is_the_wall_time():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_seconds(child.pid) is None  # reaped: no such process
    assert cpu_seconds(None) is None
    pause = random.uniform(0.05, 0.1)
    cost = CallCost(None)
    time.sleep(pause)
    assert pause <= cost.seconds() < pause + 0.05


# Versions whose grid rounds down, wrong only where a case spans more than one program of
# their block (2048 elements; 256 columns), and their honest neighbours: a tiny budget shrinks
# every case it can, but to no fewer elements than FLOOR, so the wrong ones still fail.
FLOORED = [("mish", "wrong_grid_floor", False), ("mish", "triton_libdevice", True),
           ("scale_shift", "wrong_grid_floor", False), ("scale_shift", "triton_blocked", True)]


@pytest.mark.parametrize("problem,version,right", FLOORED,
                         ids=[f"{p}/{v}" for p, v, _ in FLOORED])
def test_a_tiny_cpu_budget_still_fails_a_grid_that_rounds_down(problem, version, right, store):
    pytest.importorskip("triton")
    run = krung.evaluate(PROBLEMS / problem, PROBLEMS / problem / "solutions" / f"{version}.py",
                         store=store, device="cpu", rungs="static,compile,run,correctness",
                         settings=Settings.from_env().replace(cpu_check_budget_s=0.05))
    lines = "\n".join(r.line() for r in run.rungs)
    checked = run.rung("correctness")
    if right:
        assert run.ok, lines
        shrunk = checked.figures["cases_shrunk"]  # the budget did shrink, to the floor
        assert f"n={FLOOR + 1}," in shrunk or f"cols={FLOOR + 1}," in shrunk, shrunk
    else:
        assert checked.status is krung.Status.FAILED, lines
        assert checked.error_type == "Mismatch", lines


CHUNKED = '''
"""Running sums within chunks of 64 rows, as GPU MODE's gated-delta-net problems make them:
the generator reshapes its rows into chunks, so a row count below 64 cannot be drawn."""
import torch

CHUNK = 64
test_cases = [{"t": 320, "n": 70, "dtype": "float32"}]
bench_cases = test_cases


def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(case["t"], case["n"], generator=g, device=device)
    return (x.reshape(case["t"] // CHUNK, CHUNK, case["n"]).reshape(case["t"], case["n"]),)


def reference(x):
    return x.reshape(-1, CHUNK, x.shape[-1]).cumsum(1).reshape(x.shape)


def flops(case):
    return case["t"] * case["n"]


def bytes_moved(case):
    return 8 * case["t"] * case["n"]
'''


def test_the_determinism_rung_runs_as_declared_a_case_the_problem_cannot_make_smaller(
        tmp_path, store):
    """A tiny budget would halve the rows to a count no chunk divides (t=160, 80, 40), a
    case the generator cannot draw: determinism, like correctness, runs it as declared
    rather than end the run as krung's error."""
    folder = tmp_path / "chunked"
    folder.mkdir()
    (folder / "problem.py").write_text(CHUNKED)
    version = tmp_path / "chunked_version.py"
    version.write_text("def kernel(x):\n"
                       "    return x.reshape(-1, 64, x.shape[-1]).cumsum(1).reshape(x.shape)\n")
    run = krung.evaluate(folder, version, store=store, device="cpu",
                         rungs="static,compile,run,correctness,determinism",
                         settings=Settings.from_env().replace(cpu_check_budget_s=0.05))
    assert run.ok, "\n".join(r.line() + "\n" + (r.details or "") for r in run.rungs)
    assert run.rung("determinism").figures["case"] == "t=320,n=70,dtype=float32"
