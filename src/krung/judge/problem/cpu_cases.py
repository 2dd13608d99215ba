"""Bench cases small enough for Triton's interpreter, for problems that declare none.

On a CPU the benchmark times the version under Triton's interpreter, which runs every
program of a kernel in Python: a GPU-sized case (16384x12288) takes minutes there. A
problem's own `cpu_bench_cases` are timed when it has them. Otherwise its smallest bench
case is used if its inputs and outputs fit in CPU_CASE_BYTES (512 KiB); if not, it is shrunk:
its largest size is halved, again and again, until they fit. Sizes of MIN_SIZE (16) or less
stay as they are (heads, kernel widths, a small batch: what a problem's constraints tend to
hang on), and so do the dtypes and every other key. While the product of the sizes says the
case is far too big nothing is made; after that each candidate is checked by making its
inputs and running the reference on them, on the CPU (small by then). A shrunk case that
fails there is passed through the problem's `derive_case` (which knows its constraints);
if that fails too, the largest test case that fits stands in (test cases are valid by
construction). The benchmark rung's figures say what was timed instead of what
(`cases_reduced_for_cpu`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from krung.protocol import tree

if TYPE_CHECKING:
    from krung.judge.problem import Problem

CPU_CASE_BYTES = 1 << 19  # inputs and outputs of a case shrunk for the interpreter
MIN_SIZE = 16  # sizes at or below this are never shrunk
_ITEMSIZE = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4,
             "float16": 2, "bfloat16": 2, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


@dataclass(frozen=True)
class CpuCases:
    """The bench cases a CPU times, and where they came from when they are not the
    problem's own."""

    cases: list[dict]
    reduced: dict[str, Any] | None = None  # {"from", "to", "how", "bytes", "budget_bytes"}


def cpu_cases(problem: Problem) -> CpuCases:
    from krung.judge.problem import case_label, case_size

    if problem.cpu_bench_cases:
        return CpuCases(list(problem.cpu_bench_cases))
    smallest = min(problem.bench_cases, key=case_size)
    case, how = smallest, "halved"
    while _estimate(case) > CPU_CASE_BYTES and (smaller := halve(case)) is not None:
        case = smaller  # far too big to make: shrink by the sizes alone first
    measured = case_bytes(problem, case)
    while measured is not None and measured > CPU_CASE_BYTES and \
            (smaller := halve(case)) is not None:
        case, measured = smaller, case_bytes(problem, smaller)
    if case == smallest:
        return CpuCases([case])
    if measured is None:  # the problem refused the shrunk case: its constraints
        case, how, measured = _valid_stand_in(problem, case, smallest)
    if case == smallest:
        return CpuCases([case])
    return CpuCases([case], {"from": case_label(smallest), "to": case_label(case), "how": how,
                             "bytes": measured, "budget_bytes": CPU_CASE_BYTES})


def halve(case: dict) -> dict | None:
    """The case with its largest size above MIN_SIZE halved (not below MIN_SIZE); None
    when no size is above MIN_SIZE."""
    sizes = {k: v for k, v in case.items() if _is_size(v) and v > MIN_SIZE}
    if not sizes:
        return None
    key = max(sizes, key=lambda k: sizes[k])  # the first of equal sizes
    return {**case, key: max(MIN_SIZE, sizes[key] // 2)}


def case_bytes(problem: Problem, case: dict) -> int | None:
    """The bytes of the case's inputs and the reference's outputs, made on the CPU; None
    when the problem's generator or reference fails on it."""
    try:
        inputs = tuple(problem.make_inputs(dict(case), 0, "cpu"))
        outputs = problem.reference(*tree.clone(inputs))
    except Exception:  # the problem's own code refuses these sizes
        return None
    return tree.nbytes(inputs) + tree.nbytes(outputs)


def _estimate(case: dict) -> int:
    """A case's size from its sizes alone: their product in elements of its dtype."""
    from krung.judge.problem import case_size

    return case_size(case) * _ITEMSIZE.get(str(case.get("dtype", "")).removeprefix("torch."), 4)


def _valid_stand_in(problem: Problem, shrunk: dict, smallest: dict
                    ) -> tuple[dict, str, int | None]:
    """A case the problem accepts near `shrunk`: from its derive_case, else its largest test
    case that fits, else the smallest bench case itself."""
    from krung.judge.problem import case_size

    if problem.derive_case is not None:
        try:
            derived = problem.derive_case(dict(shrunk), random.Random(0))
        except Exception:  # the problem's own code
            derived = None
        measured = case_bytes(problem, derived) if derived else None
        if derived and measured is not None and measured <= CPU_CASE_BYTES:
            return derived, "halved, then made valid by the problem's derive_case", measured
    fitting = [c for c in problem.test_cases if _estimate(c) <= CPU_CASE_BYTES]
    same_dtype = [c for c in fitting if c.get("dtype") == smallest.get("dtype")]
    if same_dtype or fitting:
        stand_in = max(same_dtype or fitting, key=case_size)
        return stand_in, "the largest test case that fits (the problem refused the halved " \
                         "sizes)", case_bytes(problem, stand_in)
    return smallest, "", None


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
