"""`krung suite`: every problem with a solution, scored the way KernelBench scores."""

from __future__ import annotations

import math
import random
import shutil

import pytest

from krung.host.suite import SuiteEntry, find_pairs, scores
from krung.protocol.results import Run, RungResult, Status
from tests.conftest import GPUMODE, KERNELBENCH


def test_scores_follow_kernelbench_definitions():
    correct = [True, True, True, False, True]
    speedups = [0.5, 1.5, 2.5, 3.0, None]  # the wrong one's speed counts for nothing
    got = scores(correct, speedups)
    assert got["problems"] == 5 and got["correct"] == 4
    assert got["correctness"] == pytest.approx(0.8)
    assert got["fast_0"] == pytest.approx(3 / 5)  # correct and timed
    assert got["fast_1"] == pytest.approx(2 / 5)  # correct and faster than the reference
    assert got["fast_2"] == pytest.approx(1 / 5)
    assert got["geomean_speedup"] == pytest.approx(math.exp(
        (math.log(0.5) + math.log(1.5) + math.log(2.5)) / 3))
    untimed = scores(correct, [None] * 5, timed=False)
    assert untimed["correctness"] == pytest.approx(0.8)
    assert untimed["fast_1"] is None and untimed["geomean_speedup"] is None
    assert scores([], [])["correctness"] is None


def test_problems_and_solutions_are_matched_by_name(tmp_path):
    solutions = tmp_path / "sol"
    solutions.mkdir()
    for name in ("1_ReLU", "4_LayerNorm", "99_Nothing"):
        (solutions / f"{name}.py").write_text("\n")
    pairs, without_solution, without_problem = find_pairs(KERNELBENCH, solutions)
    assert [(p.name, s.name) for p, s in pairs] == [("1_ReLU.py", "1_ReLU.py"),
                                                   ("4_LayerNorm.py", "4_LayerNorm.py")]
    assert without_solution == ["2_RowSoftmax", "3_Linear", "5_CrossEntropy", "6_MatmulDropout",
                                "7_PairedRows", "8_RandomState", "9_RoundingSpread"]
    assert without_problem == ["99_Nothing"]


@pytest.mark.slow  # a whole suite
def test_kernelbench_suite_all_right(krung):
    result = krung("suite", KERNELBENCH, "--solutions", KERNELBENCH / "solutions", "--json",
                   timeout=900)
    assert result.code == 0, result.stderr
    suite = result.json()
    assert [p["problem"] for p in suite["problems"]] == ["1_ReLU", "2_RowSoftmax", "3_Linear",
                                                         "4_LayerNorm"]
    assert all(p["correct"] and p["run_id"] and p["speedup"] > 0 for p in suite["problems"])
    # progress on stderr, one line per problem as it ends (stdout holds the JSON alone)
    progress = sorted(line.split("] ", 1)[1].split(":")[0]
                      for line in result.stderr.splitlines() if line.startswith("["))
    assert progress == ["1_ReLU", "2_RowSoftmax", "3_Linear", "4_LayerNorm"], result.stderr
    assert suite["scores"]["correctness"] == 1.0 and suite["scores"]["fast_0"] == 1.0
    faster = sum(p["speedup"] > 1 for p in suite["problems"]) / 4
    assert suite["scores"]["fast_1"] == pytest.approx(faster)
    shown = krung("show", suite["problems"][2]["run_id"], "--json")
    assert shown.json()["problem"] == "3_Linear"  # each pair is an ordinary recorded run


def test_kernelbench_suite_mixed_prints_the_table_and_scores(krung, tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(KERNELBENCH / "solutions" / "2_RowSoftmax.py", mixed)
    shutil.copy(KERNELBENCH / "wrong" / "4_LayerNorm.py", mixed)
    shutil.copy(KERNELBENCH / "wrong" / "3_Linear.py", mixed)
    result = krung("suite", KERNELBENCH, "--solutions", mixed, "--precision", "fp32",
                   timeout=900)
    assert result.code == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == ["2_RowSoftmax: ok", "3_Linear: compile: ParameterMismatch",
                         "4_LayerNorm: correctness: Mismatch"]
    text = result.stdout
    assert "KernelBench scores over 3 problem(s) with a solution, precision fp32:" in text
    assert "correctness 1/3 = 0.3333" in text
    assert "fast_0 0.3333" in text
    assert "no solution for: 1_ReLU" in text


def test_gpumode_suite_with_solutions_named_by_directory(krung, tmp_path):
    solutions = tmp_path / "sol"
    solutions.mkdir()
    shutil.copy(GPUMODE / "matmul_py" / "submission.py", solutions / "matmul_py.py")
    shutil.copy(GPUMODE / "rowsoftmax_py" / "solutions" / "wrong_temperature.py",
                solutions / "rowsoftmax_py.py")
    # Two at once, through the local executor, as `krung batch --workers 2` runs them.
    result = krung("suite", GPUMODE, "--solutions", solutions, "--workers", "2", "--json",
                   timeout=900)
    assert result.code == 1, result.stderr
    suite = result.json()
    assert [p["problem"] for p in suite["problems"]] == ["matmul_py", "rowsoftmax_py"]
    verdicts = {p["problem"]: (p["format"], p["correct"]) for p in suite["problems"]}
    assert verdicts == {"matmul_py": ("gpumode", True), "rowsoftmax_py": ("gpumode", False)}
    assert suite["scores"]["correctness"] == 0.5
    assert suite["without_solution"] == ["dither_py", "prefixsum_py", "vectoradd_py"]


def test_a_suite_without_matches_is_a_usage_error(krung, tmp_path):
    (tmp_path / "empty").mkdir()
    result = krung("suite", KERNELBENCH, "--solutions", tmp_path / "empty")
    assert result.code == 2
    assert "no problem in" in result.stderr and "matched by name" in result.stderr
    result = krung("suite", KERNELBENCH, "--solutions", KERNELBENCH / "solutions",
                   "--precision", "fp64")
    assert result.code == 2 and "fp64" in result.stderr


def test_a_suite_whose_checks_did_not_run_verifies_nothing(krung, tmp_path):
    solutions = tmp_path / "sol"
    solutions.mkdir()
    shutil.copy(KERNELBENCH / "solutions" / "1_ReLU.py", solutions)
    result = krung("suite", KERNELBENCH, "--solutions", solutions, "--rungs", "static")
    assert result.code == 1, result.stderr
    assert result.stdout.splitlines()[0] == \
        "1_ReLU: not verified: correctness not climbed (add it to --rungs)"
    assert "correctness 0/1 = 0" in result.stdout


@pytest.mark.slow  # a whole suite, and nvcc over torch's headers
def test_a_cuda_solution_on_a_machine_without_a_gpu_is_not_correct(krung, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc to compile the CUDA C++ solution")
    from tests.conftest import cuda_available

    if cuda_available():
        pytest.skip("on a GPU the CUDA solution's correctness runs")
    solutions = tmp_path / "sol"
    solutions.mkdir()
    (solutions / "1_ReLU.py").write_text(ZEROS_CUDA)
    result = krung("suite", KERNELBENCH, "--solutions", solutions, "--json", timeout=900)
    assert result.code == 1, result.stderr
    (entry,) = result.json()["problems"]
    assert entry["correct"] is False
    assert entry["verdict"].startswith("not verified: correctness skipped (")
    assert result.json()["scores"]["correctness"] == 0


# A CUDA C++ ModelNew that writes zeros: only the correctness rung, on a GPU, can tell.
ZEROS_CUDA = '''
import functools

import torch
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
__global__ void zeros_kernel(float* __restrict__ out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}

torch::Tensor relu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return out;
    zeros_kernel<<<static_cast<unsigned int>((n + 255) / 256), 256>>>(
        out.data_ptr<float>(), n);
    return out;
}
"""
CPP_SOURCE = "torch::Tensor relu(torch::Tensor x);"


@functools.cache
def _module():
    return load_inline(name="krung_zeros_relu", cpp_sources=CPP_SOURCE,
                       cuda_sources=CUDA_SOURCE, functions=["relu"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _module().relu(x.contiguous())
'''


def test_krungs_own_failure_is_left_out_of_the_scores_and_the_suite_says_what_runs(
        tmp_path, store):
    """A problem whose judge dies on both tries has no verdict: it is counted apart, not as
    the solution's failure; while problems run, a line every so often names each, how long
    it has run and where it is."""
    from krung.host.suite import run_suite
    from krung.protocol.settings import Settings
    from tests.conftest import SCALE_PROBLEM, write
    from tests.test_evaluate import _crashing_problem

    problems = tmp_path / "problems"
    write(problems / "fine" / "problem.py", SCALE_PROBLEM)
    _crashing_problem(problems, always=True)
    slow = "import time\ndef kernel(x):\n    time.sleep(0.2)\n    return x * 2 + 1\n"
    for name in ("fine", "crashing"):
        write(tmp_path / "solutions" / f"{name}.py", slow)
    seen: list[str] = []
    result = run_suite(problems, tmp_path / "solutions", rungs="static,compile,run,correctness",
                       device="cpu", settings=Settings(store=store, service="off", seeds=1),
                       on_running=lambda r: seen.extend(f"{x.job.problem} {x.at}" for x in r),
                       every_s=0.5)
    by_name = {e.problem: e for e in result.entries}
    assert by_name["fine"].correct and by_name["crashing"].krung_failed
    assert by_name["crashing"].to_json()["outcome"] == "error"
    assert by_name["crashing"].verdict().startswith("krung failed, not the solution: the judge")
    scores = result.scores
    assert (scores["problems"], scores["correct"], scores["krung_errors"]) == (1, 1, 1)
    assert scores["correctness"] == 1.0 and result.krung_failed
    assert any("fine [correctness] case" in line for line in seen), seen


def test_an_evaluation_past_its_deadline_is_stopped_and_not_tried_again(krung, tmp_path,
                                                                        scale_problem, version):
    slow = version("slow", "import time\ndef kernel(x):\n    time.sleep(3)\n    return x * 2 + 1\n")
    result = krung("run", scale_problem, slow, "--rungs", "static,compile,run,correctness",
                   "--json", env={"KRUNG_RUN_TIMEOUT": "2", "KRUNG_SERVICE": "off"})
    run = result.json()
    assert result.code == 3 and run["outcome"] == "error", result.stderr
    # where it was stopped depends on the machine's load (before the first rung, or in one)
    assert "ran past its deadline (KRUNG_RUN_TIMEOUT=2 s) and was stopped " in run["error"]
    assert "first_try" not in run["env"]


def test_a_mismatchs_reason_is_whole_in_json_and_cut_on_the_terminals_line():
    """What an agent reads of a wrong element (where, got, expected) comes last in a long
    mismatch line: the suite's JSON keeps it, the terminal's line is cut."""
    got, expected = random.uniform(-3, 3), random.uniform(-3, 3)
    error = ("Mismatch: 1/2 test cases fail; batch_size=8,depth=64,height=64,width=64,"
             "dtype=float32 seed #1: 1/110398464 elements outside atol=3.56717e-05 (the "
             "policy's 0.0001 x the reference's RMS 0.357) rtol=0.0001; first mismatch at "
             f"(5, 41, 56, 33, 24): got {got:.6g}, expected {expected:.6g}")
    run = Run("r", "p", "p.py", "v.py", "0" * 64, rungs=[
        RungResult("correctness", Status.FAILED, error=error, error_type="Mismatch")])
    entry = SuiteEntry("p", "p.py", "v.py", "kernelbench", run=run)
    assert entry.to_json()["reason"] == error
    assert entry.reason() == error[:240] and len(error) > 240
