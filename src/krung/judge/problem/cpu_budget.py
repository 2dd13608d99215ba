"""Checked cases sized to a time budget on a CPU, where Triton's interpreter runs the kernel.

Under the interpreter a call costs milliseconds per program, so a declared case of 97x10007
or an unseen 1847x4861 makes a turn last a minute, and how long depends on the draw. On a
CPU the correctness rung runs its cases smallest first and learns what a call of this
version costs (`CostModel`: a fixed part, the cheapest call seen, plus seconds per unit of
the case's size, the product of its sizes, from the largest calls seen). A case whose
predicted cost is more than its share of what is left of the budget is shrunk (`shrink`)
until it fits: every case still runs, with every dtype.

Shrinking keeps what Triton specialises a kernel on: sizes move within their class (1 stays
1, a multiple of 16 stays one, any other size becomes an odd one, still awkward); the outer
sizes go first, down to the smallest of their class, so the innermost one, which usually
sets the block size (a row's width), is kept; it shrinks last, first within its power of two
(`next_power_of_2` unchanged: the same BLOCK), then by halves.

However small the budget, a shrunk case keeps more than one program's work (`FLOOR`): its
innermost size stays at least min(declared, 2048) and the product of its sizes at least
min(declared, 2048), so an odd innermost size stops at 2049, three programs of a 1024 block
and two of a 2048 one (the blocks an elementwise kernel most often takes), the last one
partial. A case that one program covers hides every bug of a grid or of the masks between
programs (a grid rounded down passes), and a loaded machine once shrank every case that far.
The floor costs little: a few programs, a few milliseconds each under the interpreter.

A call's cost is the worker's CPU time over it (`cpu_seconds`), not the judge's wall time:
wall time grows with whatever else the machine runs (two test suites at once made calls
look several times dearer), and then the same version was checked on smaller cases.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Before calls say otherwise (Triton's interpreter on a small CPU): seconds per call, per unit
# of the outer sizes' product (about one program each), per unit of the whole size.
PRIOR = (0.02, 0.01, 1e-6)
PULL_S = 0.01  # how far (in seconds of fit) a coefficient may be pulled off its prior
# No call costs less per element than this (a numpy pass over it): calls on small cases that
# cost the same whatever their size fitted 0, and a 4096^3 matmul then looked free and ran
# for minutes under the interpreter.
MIN_PER_SIZE_S = 1e-9
SAFETY = 1.25  # predictions are raised by this much: a case past its share costs the rest
# Elements a shrunk case keeps, in its innermost size and in all, where declared with more:
# several programs of a typical block (the module's docstring says why).
FLOOR = 2048


@dataclass
class CostModel:
    """Seconds per call of one version, learned as it runs: a + b x outer + c x size, where
    outer is the product of every size but the innermost (a row-wise kernel's programs) and
    size the product of all (an elementwise kernel's work), fitted over the calls seen."""

    calls: list[tuple[int, int, float]] = field(default_factory=list)  # (outer, size, s)
    coefficients: tuple[float, float, float] = PRIOR

    def note(self, case: dict, seconds: float) -> None:
        self.calls.append((*_measures(case), seconds))
        if len({c[:2] for c in self.calls}) >= 3:  # three shapes pin three coefficients
            self.coefficients = _fit(self.calls)

    def predict(self, case: dict) -> float:
        a, b, c = self.coefficients
        outer, size = _measures(case)
        return SAFETY * (a + b * outer + c * size)

    def figures(self) -> dict[str, Any]:
        a, b, c = self.coefficients
        return {"call_s": float(f"{a:.3g}"), "per_outer_s": float(f"{b:.3g}"),
                "per_size_s": float(f"{c:.3g}")}


def _measures(case: dict) -> tuple[int, int]:
    sizes = [max(v, 1) for v in case.values() if _is_size(v)]
    return math.prod(sizes[:-1]), math.prod(sizes)


def _fit(calls: list[tuple[int, int, float]]) -> tuple[float, float, float]:
    """Least squares held near the prior: small cases cannot tell a per-program cost from a
    per-element one (16x16 and 3x99 are both mostly programs), and a rate they made up
    would shrink every wide case; a coefficient leaves its prior only where the calls'
    times, to within PULL_S, need it to. Errors count relative to each call's time (a
    timing's noise is a fraction of it: absolute errors let the longest calls' noise decide
    the per-program rate), the pull relative to the median call's. Negative coefficients
    become 0, the per-element one MIN_PER_SIZE_S."""
    import numpy as np

    x = np.array([[1.0, o, s] for o, s, _ in calls])
    y = np.array([t for *_, t in calls])
    weight = 1 / np.maximum(y, 1e-4)
    pull = np.diag([PULL_S / p for p in PRIOR]) / np.median(y)
    solved = np.linalg.lstsq(np.vstack([x * weight[:, None], pull]),
                             np.concatenate([y * weight, [PULL_S / np.median(y)] * 3]),
                             rcond=None)[0]
    a, b, c = (float(max(v, 0.0)) for v in solved)
    return a, b, max(c, MIN_PER_SIZE_S)


def shrink(case: dict, fits: Callable[[dict], bool], keep_block: bool = False) -> dict:
    """The case itself if it `fits`, else the first case that does on the way down (outer
    sizes, largest first, then the innermost), or the smallest that way; with `keep_block`
    the innermost size stays within its power of two. No step takes the innermost size or
    the product of the sizes below FLOOR (or below the declared ones where those are less)."""
    keys = [k for k, v in case.items() if _is_size(v)]
    if fits(case) or not keys:
        return case
    outer, inner = keys[:-1], keys[-1]
    least_inner, least_size = min(case[inner], FLOOR), min(_measures(case)[1], FLOOR)

    def allowed(smaller: dict) -> bool:
        return smaller[inner] >= least_inner and _measures(smaller)[1] >= least_size

    while True:
        movable = [k for k in outer
                   if _half(case[k]) != case[k] and allowed({**case, k: _half(case[k])})]
        if not movable:
            break
        key = max(movable, key=lambda k: case[k])
        case = {**case, key: _half(case[key])}
        if fits(case):
            return case
    low = {**case, inner: _bucket_floor(case[inner])}
    if low != case and allowed(low):
        case = low
        if fits(case):
            return case
    while not keep_block and _half(case[inner]) != case[inner]:
        smaller = {**case, inner: _half(case[inner])}
        if not allowed(smaller):
            break
        case = smaller
        if fits(case):
            return case
    return case


def _half(size: int) -> int:
    """About half of `size` in Triton's class of it: 1 stays, a multiple of 16 stays a
    multiple of 16 (at least 16), any other size becomes odd (at least 3)."""
    if size <= 3:
        return size
    if size % 16 == 0:
        return max(16, size // 32 * 16)
    return max(3, (size // 2) | 1)


def _bucket_floor(size: int) -> int:
    """The smallest size of the same class with the same next power of two (so a block of
    next_power_of_2(size) is the same block)."""
    if size <= 3:
        return size
    power = 1 << (size - 1).bit_length()
    low = power // 2 + (16 if size % 16 == 0 else 1)
    return low if low <= size else size


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class CpuBudget:
    """The correctness rung's cases fitted, one by one, into what is left of `seconds`."""

    def __init__(self, seconds: float, usable: Callable[[dict], bool]) -> None:
        self.seconds = seconds
        self.usable = usable  # whether the problem makes inputs and a reference for a case
        self.model = CostModel()
        self.spent = 0.0
        self.shrunk: list[str] = []
        self.unaffordable: list[str] = []
        self.total = 1

    def order(self, cases: list[dict]) -> list[int]:
        """Smallest first: the cheap calls teach the model before the dear ones come."""
        from krung.judge.problem import case_size

        self.total = len(cases)
        return sorted(range(len(cases)), key=lambda i: case_size(cases[i]))

    def note(self, case: dict, seconds: float, first: bool = False) -> None:
        """A call's cost (`CallCost`); the process's first call (one-time costs: Triton's
        first launch, a trace that loads Dynamo) neither teaches the model nor spends the
        budget."""
        if first:
            return
        self.model.note(case, seconds)
        self.spent += seconds

    def fit(self, case: dict, seeds: int, left: int, extra: bool = False) -> dict | None:
        """The case, or a smaller one that fits its share (what is left, over the cases
        left); a bench shape that does not fit even at its smallest is None, and said. An
        `extra` case (a value stress: its values matter, not its shape) comes after the
        others, takes what they left, and shrinks as far as it must."""
        from krung.judge.problem import case_label

        # at least a floor, so cases that come after a misjudged one still get checked; a
        # bench shape (one seed, its code path) at least an eighth of the budget
        bench = seeds == 1 and not extra
        floor = 8 * self.total if extra else 8 if bench else 2 * self.total
        share = max(max(self.seconds - self.spent, 0.0) / max(left, 1), self.seconds / floor)

        def fits(candidate: dict) -> bool:
            return seeds * self.model.predict(candidate) <= share

        smaller = shrink(case, fits, keep_block=True)  # the block it sets, where it fits
        if not bench and not fits(smaller):
            smaller = shrink(smaller, fits)
        if smaller == case:
            return case
        if not self.usable(smaller):  # the problem's own limits: check it as declared
            return case
        if bench and not fits(smaller):  # a bench shape: checked only where affordable
            predicted = self.model.predict(smaller)
            self.unaffordable.append(f"{case_label(case)}: its smallest form "
                                     f"{case_label(smaller)} would take ~{predicted:.1f} s")
            return None
        self.shrunk.append(f"{case_label(case)} -> {case_label(smaller)}")
        return smaller

    def figures(self) -> dict[str, Any]:
        figures: dict[str, Any] = {"cpu_budget_s": self.seconds,
                                   "cpu_spent_s": round(self.spent, 3),
                                   "cpu_cost": self.model.figures()}
        if self.shrunk:
            figures["cases_shrunk"] = "; ".join(self.shrunk)
        if self.unaffordable:
            figures["bench_paths_unchecked"] = "; ".join(self.unaffordable)
        return figures


def cpu_seconds(pid: int | None) -> float | None:
    """The CPU time process `pid` has spent so far, all its threads (ended ones too), in
    seconds to the nanosecond; None where it cannot be read (no such process, not Linux).

    What a checked call costs is read here, the kernel's count for the worker, rather than
    as the judge's wall time: wall time grows when other processes share the cores, so a
    loaded machine made every call look dearer and shrank the cases, and CPU time does not.
    The version's code cannot lower the count (work it hands to another process is not
    counted, but that only makes its cases larger), and raising it shrinks its cases no
    further than `FLOOR`. The clock is the process's CPU clock (Linux's encoding of one for
    another process's pid, what glibc's clock_getcpuclockid gives): finer than /proc's
    utime and stime (10 ms ticks, too coarse for calls of 5-50 ms), and unlike the threads'
    schedstat it keeps the time of threads that have ended."""
    if not pid:
        return None
    try:
        return time.clock_gettime((~pid << 3) | 2)  # CPUCLOCK_SCHED of the whole process
    except (OSError, AttributeError, OverflowError):  # AttributeError: no clock_gettime
        return None


class CallCost:
    """What one call costs the worker `pid`: its CPU time from here to `seconds()`
    (`cpu_seconds`), or the judge's wall time where the CPU time cannot be read."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.wall, self.cpu = time.perf_counter(), cpu_seconds(pid)

    def seconds(self) -> float:
        cpu = cpu_seconds(self.pid)
        if cpu is None or self.cpu is None:
            return time.perf_counter() - self.wall
        return cpu - self.cpu
