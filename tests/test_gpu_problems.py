"""The problems the GPU tests write, loaded here on the CPU: a defect in one (a missing
`flops`, checked sizes all powers of two) fails here, not in a GPU gate's device call."""

from __future__ import annotations

from krung.judge.problem import load_problem
from tests import test_gpu

PROBLEMS = {name: source for name, source in vars(test_gpu).items()
            if name.isupper() and isinstance(source, str) and "def make_inputs" in source}


def test_every_problem_a_gpu_test_writes_loads_without_defects(tmp_path):
    assert len(PROBLEMS) >= 2, sorted(PROBLEMS)  # the row sums; none found would pass vacuously
    for name, source in PROBLEMS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "problem.py").write_text(source)
        problem = load_problem(tmp_path / name)
        assert problem.test_cases and problem.bench_cases, name
