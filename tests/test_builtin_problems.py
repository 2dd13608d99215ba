"""Every built-in problem: its Triton versions pass, its deliberately wrong version fails.

On a machine without a GPU the kernels run under Triton's interpreter; with CUDA, on the GPU.
"""

from __future__ import annotations

import pytest

import krung
from krung.protocol.settings import Settings
from tests.conftest import PROBLEMS, cuda_available

pytest.importorskip("triton")

pytestmark = pytest.mark.newest  # also with the newest packages (make test-newest)

GOOD = sorted(PROBLEMS.glob("*/solutions/triton*.py"))
WRONG = sorted(PROBLEMS.glob("*/solutions/wrong*.py"))
# `make test` checks one good and one wrong version (and the whole ladder on softmax's below);
# the whole set, each under Triton's interpreter, is for `make test-all`.
QUICK = {"vector_add/triton_blocked", "matmul/wrong_k_tail"}


def _id(path):
    return f"{path.parent.parent.name}/{path.stem}"


def _params(paths):
    return [pytest.param(path, id=_id(path),
                         marks=() if _id(path) in QUICK else pytest.mark.slow)
            for path in paths]


def test_every_problem_has_a_good_and_a_wrong_version():
    names = {p.name for p in PROBLEMS.iterdir() if (p / "problem.py").is_file()}
    assert {"vector_add", "softmax", "rmsnorm", "matmul"} <= names
    for name in names:
        assert any(p.parent.parent.name == name for p in GOOD), name
        assert any(p.parent.parent.name == name for p in WRONG), name


@pytest.mark.parametrize("solution", _params(GOOD))
def test_good_versions_pass(solution, store):
    run = krung.evaluate(solution.parent.parent, solution, store=store, device="cpu",
                         rungs="static,compile,run,correctness")
    assert run.ok, "\n".join(r.line() for r in run.rungs)
    assert run.rung("correctness").figures["passed"] == len(
        run.rung("correctness").figures["per_case"])


# Wrong only on a path that bench-sized rows take (wider than 8192): on a CPU that path is
# checked where the time budget affords the bench shape, which a loaded machine may not at the
# default budget (the run then says `OK with unchecked paths`).
BUDGET_S = {"row_logsumexp/wrong_unscaled_loop": 40.0}


@pytest.mark.parametrize("solution", _params(WRONG))
def test_wrong_versions_fail_correctness(solution, store):
    budget = BUDGET_S.get(_id(solution))
    run = krung.evaluate(solution.parent.parent, solution, store=store, device="cpu",
                         rungs="static,compile,run,correctness",
                         settings=Settings.from_env().replace(cpu_check_budget_s=budget))
    failed = [r for r in run.rungs if r.status is krung.Status.FAILED]
    assert [r.name for r in failed] in (["correctness"], ["run"]), \
        "\n".join(r.line() for r in run.rungs)
    assert failed[0].error_type in ("Mismatch", "NonFinite")


# the default ladder under the interpreter, as test_cpu_cases and test_workspace climb it
@pytest.mark.slow
def test_the_whole_ladder_on_cpu_benchmarks_against_the_reference(store):
    solution = PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py"
    run = krung.evaluate("softmax", solution, store=store, device="cpu")
    assert run.ok, "\n".join(r.line() for r in run.rungs)
    bench = run.rung("benchmark").figures
    assert bench["timer"] == "cpu-wall"
    assert [c["case"] for c in bench["per_case"]] == [
        "rows=64,cols=1000,dtype=float32", "rows=64,cols=1000,dtype=bfloat16"]


@pytest.mark.gpu
@pytest.mark.parametrize("solution", GOOD + WRONG, ids=_id)
def test_builtin_versions_on_the_gpu(solution, store):
    assert cuda_available()
    run = krung.evaluate(solution.parent.parent, solution, store=store, device="cuda")
    lines = "\n".join(r.line() for r in run.rungs)
    print(f"{_id(solution)} on {run.device}\n{lines}")
    if solution in GOOD:
        assert run.ok, lines
        assert run.rung("benchmark").figures["timer"] == "cupti"
    else:
        # The poisoned output memory may already show in the run rung's first call.
        assert krung.Status.FAILED in (run.rung("run").status,
                                       run.rung("correctness").status), lines
