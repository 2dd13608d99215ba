"""Running a problem at smaller sizes (`--scale 0.1`, KRUNG_SCALE), so that the CPU loop
works on problems sized for a GPU (KernelBench's level-1 ReLU moves 6 GiB at its declared
sizes).

Each size is multiplied by the scale and rounded to a multiple of a power of two it shares
(so sizes that were multiples of 8 stay so, and sizes that must divide each other mostly
still do). Small sizes are left alone: they are kernel sizes, strides, dimensions to
reduce over or head counts, not the bulk of the work. Which sizes scale depends on the format:

- KernelBench: the module-level size constants (`batch_size`, `dim`, `in_channels`, and
  the ints of `input_shape = (4096,)`); what derives from them follows
  (krung.judge.problem.sizes); constants that `Model` itself reads stay;
- GPU MODE and krung's own format: the integer entries of the test and bench cases that
  vary among the declared cases (the others are the problem's constants).

A scaled run names its problem `NAME@scale0.1`, so its history never mixes with full-size
runs, and records the sizes it changed with the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from krung.judge.problem import Problem

SMALLEST_SCALED = 8  # sizes below this stay as declared
MAX_GRANULE = 8  # the power of two a scaled size keeps, at most (KernelBench)


def scaled_size(size: int, scale: float, granule: int | None = None) -> int:
    """`size` times `scale`, rounded to a multiple of `granule` (by default the largest
    power of two, up to MAX_GRANULE, that divides `size`), never below the granule nor
    above `size`; sizes below SMALLEST_SCALED as they are."""
    if size < SMALLEST_SCALED or scale >= 1:
        return size
    if granule is None:
        granule = 1
        while size % (granule * 2) == 0 and granule < MAX_GRANULE:
            granule *= 2
    multiple = round(size * scale / granule) * granule
    return min(size, max(granule, multiple))


def scaled_value(value: Any, scale: float) -> Any:
    """An int, or a tuple or list of ints, scaled element by element; anything else as it is."""
    if _is_size(value):
        return scaled_size(value, scale)
    if isinstance(value, (tuple, list)) and value and all(
            _is_size(v) or isinstance(v, int) for v in value):
        return type(value)(scaled_size(v, scale) if _is_size(v) else v for v in value)
    return value


def scale_cases(cases: list[dict], scale: float, granules: dict[str, int]) -> list[dict]:
    """Each case with the entries named in `granules` (the sizes that vary, with the power
    of two every declared value shares) scaled; cases that become alike are kept once."""
    scaled: list[dict] = []
    for case in cases:
        new = {key: scaled_size(value, scale, granules[key])
               if key in granules and _is_size(value) else value
               for key, value in case.items()}
        if new not in scaled:
            scaled.append(new)
    return scaled


def case_changes(before: list[dict], after: list[dict]) -> dict[str, str]:
    """Which entries scaling changed, as `key: "declared span -> scaled span"` for the
    run's record."""
    changed: dict[str, list[list[int]]] = {}
    for old in before:
        for key, value in old.items():
            if isinstance(value, int) and not isinstance(value, bool):
                changed.setdefault(key, [[], []])[0].append(value)
    for new in after:
        for key, value in new.items():
            if key in changed and isinstance(value, int):
                changed[key][1].append(value)
    return {key: f"{_span(b)} -> {_span(a)}" for key, (b, a) in changed.items()
            if sorted(set(b)) != sorted(set(a))}


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}..{high}"


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def scale_problem_cases(problem: Problem, scale: float) -> None:
    """Scale a GPU MODE or native problem's test and bench cases in place: the integer
    entries that vary among its declared cases, keeping the power of two all their declared
    values share (sizes that were all multiples of 64 stay so)."""
    from krung.judge.problem.unseen import shared_granule

    declared = problem.test_cases + problem.bench_cases + problem.cpu_bench_cases
    values: dict[str, list[Any]] = {}
    for case in declared:
        for key, value in case.items():
            values.setdefault(key, []).append(value)
    granules = {key: shared_granule(found) for key, found in values.items()
                if all(_is_size(v) for v in found) and len(set(found)) > 1}
    before = problem.test_cases + problem.bench_cases
    problem.test_cases = scale_cases(problem.test_cases, scale, granules)
    problem.bench_cases = scale_cases(problem.bench_cases, scale, granules)
    problem.cpu_bench_cases = scale_cases(problem.cpu_bench_cases, scale, granules)
    problem.facts["scale"] = scale
    problem.facts["scaled_sizes"] = case_changes(before, problem.test_cases + problem.bench_cases)
