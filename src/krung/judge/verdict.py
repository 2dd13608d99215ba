"""Is one call's output right? The judge's answer, the same for every rung that asks.

Every output is compared with the reference's in float64 (krung.judge.metrics) under the per-dtype
policy (krung.judge.tolerance, after the problem's override). A problem may also bring its own
check (GPU MODE's `check_implementation(data, output)`); it runs here, in the judge, on a
copy of the inputs as they were made, never in the version's process. Such a problem decides
closeness itself (`tolerance_decides` is False: an eigendecomposition may flip a vector's
sign, a sampling kernel may differ element by element), and krung's metrics are reported
beside its verdict; NaN or Inf where the reference is finite fails whatever the check says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from krung.judge import tolerance
from krung.judge.metrics import Comparison, compare
from krung.judge.spread import allowance
from krung.protocol import tree

if TYPE_CHECKING:
    from krung.judge.problem import Problem


@dataclass
class Verdict:
    passed: bool
    comparisons: list[Comparison] = field(default_factory=list)  # one per output
    reason: str = ""  # why it failed, in words
    out_index: int = 0  # the output the reason is about
    check_message: str | None = None  # what the problem's own check said, if it said anything

    @property
    def comparison(self) -> Comparison | None:
        """The comparison of the output the verdict is about."""
        return self.comparisons[self.out_index] if self.comparisons else None


def judge_outputs(problem: Problem, inputs: tuple, outputs: list, expected: list,
                  returned_tuple: bool, device: str,
                  spread: list[float] | None = None) -> Verdict:
    """`spread`: per output, the reference's own spread by rounding, where it was seen
    (krung.judge.spread); each output's atol grows by it."""
    spreads = spread or [0.0] * len(expected)
    comparisons = [_compare(out, ref, problem, allowance(ref, s))
                   for out, ref, s in zip(outputs, expected, spreads, strict=True)]
    for index, result in enumerate(comparisons):
        decisive = not result.passed if problem.tolerance_decides else result.figures.get(
            "nonfinite", 0) > 0
        if decisive:
            return Verdict(False, comparisons, result.reason, index)
    if problem.check is None:
        return Verdict(True, comparisons)
    placed = [out.to(device) for out in outputs]
    output: Any = tuple(placed) if returned_tuple else placed[0]
    try:
        ok, message = problem.check(tree.clone(inputs), output)
    except Exception as exc:  # the problem's check could not take this output
        if _out_of_memory(exc):  # the GPU the judge shares, not the output: krung's error
            raise
        ok, message = False, f"raised {type(exc).__name__}: {exc}"
    if ok:
        return Verdict(True, comparisons, check_message=message or None)
    index = next((i for i, c in enumerate(comparisons) if not c.passed), 0)
    reason = "the problem's own check failed" + (f": {message}" if message else "")
    return Verdict(False, comparisons, reason, index, check_message=message or "failed")


def _out_of_memory(exc: Exception) -> bool:
    """torch's out-of-memory error (the judge imports torch before any check runs)."""
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError)


def _compare(out: Any, ref: Any, problem: Problem, spread_atol: float) -> Comparison:
    """krung's metrics for one output; an output of another shape (which only a problem
    whose own check decides may return) has none, and the check judges it."""
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, {"elements": ref.numel()},
                          f"shape {tuple(out.shape)}, the reference's {tuple(ref.shape)}")
    return compare(out, ref, tolerance.resolve(_dtype(ref), problem.tolerance), spread_atol)


def _dtype(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")
