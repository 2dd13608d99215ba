"""Checked cases sized to a CPU's time budget (krung.judge.problem.cpu_budget)."""

from __future__ import annotations

import random

from krung.judge.problem import case_size
from krung.judge.problem.cpu_budget import CostModel, shrink


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


def test_shrinking_without_the_block_reaches_the_budget_when_it_can():
    rng = random.Random()
    for _ in range(100):
        case = {"n": rng.randint(5000, 10 ** 7), "dtype": "bfloat16"}
        limit = rng.randint(100, 4000)
        smaller = shrink(case, lambda c, limit=limit: case_size(c) <= limit)
        assert case_size(smaller) <= limit
        assert _class(smaller["n"]) == _class(case["n"]) or smaller["n"] == 3


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
