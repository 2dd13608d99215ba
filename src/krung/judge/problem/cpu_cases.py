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
fails there is passed through the problem's `derive_case` (which knows its constraints),
and the halving goes on from the case it gives; where that fails too, the largest test case
that fits stands in (test cases are valid by construction). The benchmark rung's figures say what was timed instead of what
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
MAX_STEPS = 64  # made and checked cases at most (each halving halves one size)
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
    case, how, measured = _shrunk(problem, smallest)
    if case == smallest:
        return CpuCases([case])
    return CpuCases([case], {"from": case_label(smallest), "to": case_label(case), "how": how,
                             "bytes": measured, "budget_bytes": CPU_CASE_BYTES})


def _shrunk(problem: Problem, smallest: dict) -> tuple[dict, str, int | None]:
    """The smallest bench case, halved until it fits (made valid by derive_case on the way
    where the problem refuses a halved case); else the largest test case that fits."""
    case, how = smallest, "halved"
    while _estimate(case) > CPU_CASE_BYTES and (smaller := halve(case)) is not None:
        case = smaller  # far too big to make: shrink by the sizes alone first
    for _ in range(MAX_STEPS):
        measured = case_bytes(problem, case)
        if measured is None and case != smallest:  # refused: the problem's constraints
            derived = _derived(problem, case)
            measured = case_bytes(problem, derived) if derived is not None else None
            if measured is not None:
                case, how = derived, "halved, then made valid by the problem's derive_case"
        if measured is None or measured <= CPU_CASE_BYTES:
            break
        smaller = halve(case)
        if smaller is None:  # as small as halving makes it
            return case, how, measured
        case = smaller
    if measured is not None or case == smallest:
        return case, how, measured
    return _largest_test_case(problem, smallest)


def _derived(problem: Problem, case: dict) -> dict | None:
    if problem.derive_case is None:
        return None
    try:
        return problem.derive_case(dict(case), random.Random(0))
    except Exception:  # the problem's own code
        return None


def _largest_test_case(problem: Problem, smallest: dict) -> tuple[dict, str, int | None]:
    """The largest test case that fits (of the bench case's dtype where one is), a case the
    problem accepts by construction; the smallest bench case itself when none fits."""
    from krung.judge.problem import case_size

    fitting = [c for c in problem.test_cases if _estimate(c) <= CPU_CASE_BYTES]
    same_dtype = [c for c in fitting if c.get("dtype") == smallest.get("dtype")]
    if not fitting:
        return smallest, "", None
    stand_in = max(same_dtype or fitting, key=case_size)
    return stand_in, "the largest test case that fits (the problem refused the halved " \
                     "sizes)", case_bytes(problem, stand_in)


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


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
