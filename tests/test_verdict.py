"""Is one call's output right? (krung.judge.verdict): every output compared in float64 under
the per-dtype tolerance or the problem's override, and the problem's own check where it has
one. Real problems (the dataclass the loaders make), fresh random tensors."""

from __future__ import annotations

from pathlib import Path

import torch

from krung.judge.problem import Problem
from krung.judge.verdict import judge_outputs


def problem(**settings) -> Problem:
    return Problem(name="twice", path=Path("."), reference=lambda x: (x * 2, x.sum()),
                   make_inputs=lambda case, seed, device: (torch.randn(case["n"]),),
                   test_cases=[{"n": 100}], bench_cases=[{"n": 100}],
                   flops=lambda case: case["n"], bytes_moved=lambda case: 8 * case["n"],
                   **settings)


def outputs(x: torch.Tensor) -> list[torch.Tensor]:
    return [x * 2, x.sum()]


def test_outputs_equal_to_the_reference_pass():
    x = torch.randn(100)
    verdict = judge_outputs(problem(), (x,), outputs(x), outputs(x), True, "cpu")
    assert verdict.passed and verdict.reason == ""
    assert [c.figures["max_abs_err"] for c in verdict.comparisons] == [0.0, 0.0]
    assert verdict.comparisons[0].figures["psnr_db"] is None  # equal: no noise to measure


def test_an_output_out_of_tolerance_fails_and_is_the_one_named():
    # positive inputs: the sum's RMS is above 1 whatever the draw, so atol is the policy's own
    # (below 1 it scales with the RMS: test_metrics)
    x = torch.rand(100) + 0.5
    got = outputs(x)
    got[1] = got[1] + 1e-2 * (got[1].abs() + 1)  # beyond float32's 1e-4
    verdict = judge_outputs(problem(), (x,), got, outputs(x), True, "cpu")
    assert not verdict.passed and verdict.out_index == 1
    assert verdict.reason.startswith("1/1 elements outside atol=0.0001 rtol=0.0001")
    assert verdict.comparison is verdict.comparisons[1]
    assert verdict.comparison.first_mismatch == []  # a scalar: no index


def test_the_dtype_sets_the_tolerance_and_the_problem_may_widen_it():
    x = torch.randn(100, dtype=torch.float16)
    near = [x * 2 * (1 + 2e-3), x.sum()]  # within float16's 1e-2
    assert judge_outputs(problem(), (x,), near, outputs(x), True, "cpu").passed
    y = torch.randn(100)
    off = [y * 2 * (1 + 2e-3), y.sum()]
    assert not judge_outputs(problem(), (y,), off, outputs(y), True, "cpu").passed
    wide = problem(tolerance={"atol": 1e-2, "rtol": 1e-2})
    assert judge_outputs(wide, (y,), off, outputs(y), True, "cpu").passed


def test_nan_where_the_reference_is_finite_fails_whatever_the_check_says():
    x = torch.randn(100)
    got = outputs(x)
    got[0][17] = float("nan")
    lenient = problem(check=lambda inputs, output: (True, ""), tolerance_decides=False)
    verdict = judge_outputs(lenient, (x,), got, outputs(x), True, "cpu")
    assert not verdict.passed and verdict.out_index == 0
    assert "NaN/Inf where the reference is finite" in verdict.reason
    assert verdict.comparison.first_mismatch == [17]


def test_the_problems_own_check_decides_where_it_says_so():
    x = torch.randn(100)
    flipped = [-(x * 2), x.sum()]  # wrong for the tolerance, right for a sign-blind check
    seen: list[tuple] = []

    def sign_blind(inputs, output):
        seen.append(inputs)
        inputs[0].zero_()  # its copy: the caller's inputs stay as they were
        return bool(torch.allclose(output[0].abs(), (x * 2).abs())), "up to sign"

    decides = problem(check=sign_blind, tolerance_decides=False)
    before = x.clone()
    verdict = judge_outputs(decides, (x,), flipped, outputs(x), True, "cpu")
    assert verdict.passed and verdict.check_message == "up to sign"
    assert torch.equal(x, before) and seen[0][0] is not x
    assert verdict.comparisons[0].figures["max_abs_err"] > 0  # reported beside its verdict

    refuses = problem(check=lambda inputs, output: (False, "wrong sign"),
                      tolerance_decides=False)
    said = judge_outputs(refuses, (x,), outputs(x), outputs(x), True, "cpu")
    assert not said.passed and said.reason == "the problem's own check failed: wrong sign"
    assert said.check_message == "wrong sign"


def test_a_check_that_raises_fails_the_output_and_says_what_it_raised():
    x = torch.randn(100)

    def breaks(inputs, output):
        raise ValueError("no such field")

    verdict = judge_outputs(problem(check=breaks, tolerance_decides=False), (x,), outputs(x),
                            outputs(x), True, "cpu")
    assert not verdict.passed
    assert verdict.reason == "the problem's own check failed: raised ValueError: no such field"


def test_an_output_of_another_shape_has_no_metrics_and_the_check_judges_it():
    x = torch.randn(100)
    reshaped = [(x * 2).reshape(10, 10), x.sum()]
    verdict = judge_outputs(problem(), (x,), reshaped, outputs(x), True, "cpu")
    assert not verdict.passed and verdict.reason == "shape (10, 10), the reference's (100,)"
    assert verdict.comparisons[0].figures == {"elements": 100}
    accepts = problem(check=lambda inputs, output: (True, ""), tolerance_decides=False)
    assert judge_outputs(accepts, (x,), reshaped, outputs(x), True, "cpu").passed
