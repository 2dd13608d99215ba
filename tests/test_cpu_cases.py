"""Bench cases for the CPU (krung.judge.problem.cpu_cases): a problem's own cpu_bench_cases,
else its smallest bench case shrunk to fit Triton's interpreter, keeping its dtype and the
problem's constraints; and a GPU-sized problem's whole default ladder on the CPU."""

from __future__ import annotations

import random

import pytest

from krung.judge.problem import case_label, load_problem
from krung.judge.problem.cpu_cases import CPU_CASE_BYTES, MIN_SIZE
from tests.conftest import PROBLEMS, write

# rows x cols, any float dtype; `cols` must be a multiple of 1000 where MULTIPLE says so.
WIDE = '''
    import torch

    MULTIPLE = {multiple}
    description = "y = 2x + 1 over a (rows, cols) tensor"

    def reference(x):
        return x * 2 + 1

    def make_inputs(case, seed, device):
        if case["cols"] % MULTIPLE:
            raise ValueError(f"cols must be a multiple of {{MULTIPLE}}, not {{case['cols']}}")
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(case["rows"], case["cols"], generator=g, device=device)
        return (x.to(getattr(torch, case["dtype"])),)

    test_cases = [{{"rows": 3, "cols": MULTIPLE, "dtype": "float32"}},
                  {{"rows": 5, "cols": 2 * MULTIPLE, "dtype": "bfloat16"}},
                  {{"rows": 2, "cols": 3 * MULTIPLE, "dtype": "float32"}}]
    bench_cases = {bench}

    def flops(case):
        return 2 * case["rows"] * case["cols"]

    def bytes_moved(case):
        return 2 * case["rows"] * case["cols"] * getattr(torch, case["dtype"]).itemsize
{more}'''

DERIVE = '''
    def derive_case(case, rng):  # the nearest multiple of 1000 below, at least 1000
        return {**case, "cols": max(MULTIPLE, case["cols"] // MULTIPLE * MULTIPLE)}
'''


def wide_problem(tmp_path, bench, multiple=1, more=""):
    folder = tmp_path / f"wide{random.randrange(10**9)}"
    write(folder / "problem.py", WIDE.format(multiple=multiple, bench=bench, more=more))
    return load_problem(folder)


def io_bytes(case):
    return 2 * case["rows"] * case["cols"] * (2 if case["dtype"] == "bfloat16" else 4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_gpu_sized_case_is_halved_until_it_fits_the_interpreter(tmp_path, dtype):
    rows, cols = random.choice([(16384, 12288), (12288, 16384), (8192, 24576)])
    bench = [{"rows": rows, "cols": cols, "dtype": dtype},
             {"rows": 2 * rows, "cols": cols, "dtype": dtype}]
    problem = wide_problem(tmp_path, bench)
    [case] = problem.bench_cases_for("cpu")
    assert problem.bench_cases_for("cuda") == bench  # a GPU times them as declared
    assert set(case) == {"rows", "cols", "dtype"} and case["dtype"] == dtype
    assert io_bytes(case) <= CPU_CASE_BYTES < 2 * io_bytes(case) * 2  # fits, and not tiny
    for key, full in (("rows", rows), ("cols", cols)):  # each size halved some times
        assert full % case[key] == 0 and (full // case[key]) & (full // case[key] - 1) == 0
    reduced = problem.cpu_reduction()
    assert reduced == {"from": case_label(bench[0]), "to": case_label(case), "how": "halved",
                       "bytes": io_bytes(case), "budget_bytes": CPU_CASE_BYTES}


def test_declared_cpu_cases_and_small_bench_cases_are_timed_as_they_are(tmp_path):
    softmax = load_problem(PROBLEMS / "softmax")
    assert softmax.bench_cases_for("cpu") == softmax.cpu_bench_cases
    assert softmax.cpu_reduction() is None
    small = [{"rows": 40, "cols": 300, "dtype": "float32"},
             {"rows": 20, "cols": 100, "dtype": "float32"}]
    problem = wide_problem(tmp_path, small)
    assert problem.bench_cases_for("cpu") == [small[1]] and problem.cpu_reduction() is None


def test_sizes_of_sixteen_or_less_are_kept(tmp_path):
    rows = random.randint(2, MIN_SIZE)
    problem = wide_problem(tmp_path, [{"rows": rows, "cols": 1 << 24, "dtype": "float32"}])
    [case] = problem.bench_cases_for("cpu")
    assert case["rows"] == rows and io_bytes(case) <= CPU_CASE_BYTES


def test_a_halved_case_the_problem_refuses_is_made_valid_by_its_derive_case(tmp_path):
    bench = [{"rows": 16, "cols": 1_000_000, "dtype": "float32"}]
    problem = wide_problem(tmp_path, bench, multiple=1000, more=DERIVE)
    [case] = problem.bench_cases_for("cpu")
    # 1e6 halves to 7812 (refused) -> 7000 (too big) -> 3500 (refused) -> 3000.
    assert case == {"rows": 16, "cols": 3000, "dtype": "float32"}
    assert problem.cpu_reduction()["how"] == "halved, then made valid by the problem's " \
                                             "derive_case"


def test_without_derive_case_the_largest_fitting_test_case_stands_in(tmp_path):
    bench = [{"rows": 16, "cols": 1_000_000, "dtype": "float32"}]
    problem = wide_problem(tmp_path, bench, multiple=1000)
    [case] = problem.bench_cases_for("cpu")
    assert case == {"rows": 2, "cols": 3000, "dtype": "float32"}  # fp32, as the bench case
    reduced = problem.cpu_reduction()
    assert reduced["how"].startswith("the largest test case that fits")
    assert reduced["bytes"] == io_bytes(case)


def test_a_gpu_sized_problem_climbs_the_cpu_default_ladder_on_small_cases(krung, tmp_path):
    """The built-in softmax with GPU-sized bench cases and no cpu_bench_cases: its Triton
    version climbs the default ladder on the CPU, timing a case shrunk for the interpreter,
    where the declared cases took minutes. Two small test cases, one a dtype, in place of
    the built-in's ten: the correctness of the built-in's own is test_builtin_problems'."""
    folder = tmp_path / "bigsoftmax"
    source = (PROBLEMS / "softmax" / "problem.py").read_text()
    start, end = source.index("test_cases = ["), source.index("def _itemsize")
    write(folder / "problem.py", source[:start] + (
        'test_cases = [{"rows": 5, "cols": 37, "dtype": "float32"},\n'
        '              {"rows": 17, "cols": 129, "dtype": "bfloat16"}]\n'
        'bench_cases = [{"rows": 16384, "cols": 12288, "dtype": "float32"},\n'
        '               {"rows": 16384, "cols": 12288, "dtype": "bfloat16"}]\n\n\n')
        + source[end:])
    version = PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py"
    result = krung("run", folder, version, "--json", timeout=300)
    assert result.code == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert list(rungs)[-1] == "roofline" and "profile" not in rungs
    bench = rungs["benchmark"]["figures"]
    [row] = bench["per_case"]
    assert row["case"] != "rows=16384,cols=12288,dtype=float32"
    assert bench["cases_reduced_for_cpu"].startswith(
        f"rows=16384,cols=12288,dtype=float32 -> {row['case']} (halved;")
    rows, cols = (int(part.split("=")[1]) for part in row["case"].split(",")[:2])
    assert 2 * rows * cols * 4 <= CPU_CASE_BYTES
