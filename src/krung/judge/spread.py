"""A reference that disagrees with itself by rounding only: the version is held to that spread.

Some library algorithms are nondeterministic in the last bits (cuDNN's ConvTranspose2d adds
partial sums in an order that varies between calls). Run twice on the same inputs, such a
reference differs in a few elements by a few units in the last place (ulps) of the output's
largest values. krung's atol scales with the output's RMS, and where the RMS lies far below
the largest values it is tighter than that spread: then no version passes reliably, the
reference itself included (KernelBench's level-2 93_ConvTranspose2d_Add_Min_GELU_Multiply on an
H100: 5 of 277M elements out, its two runs 208 elements apart).

Where the two runs of every output differ by at most ROUNDING_ULPS ulps of its largest
magnitude, the difference is rounding, and each output's atol grows by MARGIN times it:
relative to the output's largest magnitude, so it carries to other inputs and sizes. A larger
difference is nondeterminism by design (dropout, sampling): no allowance, and a version is
refused as before (`NondeterministicReference`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from krung.judge.metrics import paired, piece_size, pieces

if TYPE_CHECKING:
    from krung.judge.ladder import Context
    from krung.judge.metrics import Comparison
    from krung.judge.verdict import Verdict

ROUNDING_ULPS = 64
MARGIN = 2.0


def spread_seen(ctx: Context, inputs: tuple, expected: list, verdict: Verdict) -> bool:
    """Whether a failing call's reference, run again on its inputs, disagrees with itself by
    rounding only, seen for the first time: then ctx.reference_spread holds it, and every
    judgement from now on allows it. Where krung's tolerance decides, once per evaluation,
    and only where the call's errors could be such rounding: a reference run more holds
    another copy of the outputs beside them, GiB at declared sizes, and a wrong version's
    errors are far past it."""
    if ctx.reference_spread is not None or not ctx.problem.tolerance_decides:
        return False
    if not all(_within_rounding(c, ref) for c, ref in zip(verdict.comparisons, expected,
                                                            strict=True) if not c.passed):
        return False
    ctx.reference_spread = rounding_spread(expected, ctx.expected(inputs)) or []
    return bool(ctx.reference_spread)


def _within_rounding(comparison: Comparison, reference: torch.Tensor) -> bool:
    """Whether a failing output's errors are no larger than the most a rounding spread
    allows (MARGIN times ROUNDING_ULPS ulps of its largest magnitude), and all finite."""
    error = comparison.figures.get("max_abs_err")
    if not reference.is_floating_point() or comparison.figures.get("nonfinite") or \
            not isinstance(error, float) or not math.isfinite(error):
        return False
    eps = torch.finfo(reference.dtype).eps
    return error <= MARGIN * ROUNDING_ULPS * eps * largest_magnitude(reference)


def rounding_spread(first: list, again: list) -> list[float] | None:
    """Per output, the largest difference between the reference's two runs relative to the
    output's largest magnitude, where each is rounding (at most ROUNDING_ULPS ulps of it) and
    some output differs at all; None otherwise: by design, no difference, or outputs this
    cannot measure (integers, other shapes, NaN in one run only)."""
    spreads = []
    for a, b in zip(first, again, strict=True):
        if not (a.is_floating_point() and a.dtype == b.dtype and a.shape == b.shape):
            return None
        largest = largest_magnitude(a)
        apart = _largest_difference(a, b)
        if apart is None or not math.isfinite(largest):
            return None
        if apart == 0:
            spreads.append(0.0)
            continue
        if largest == 0 or apart > ROUNDING_ULPS * torch.finfo(a.dtype).eps * largest:
            return None
        spreads.append(apart / largest)
    return spreads if any(spreads) else None


def allowance(reference: torch.Tensor, spread: float) -> float:
    """What an output's atol grows by: MARGIN times the spread, at this reference's scale."""
    return MARGIN * spread * largest_magnitude(reference) if spread else 0.0


def largest_magnitude(tensor: torch.Tensor) -> float:
    """The largest |element| among the finite ones, piece by piece (no whole float64 copy)."""
    largest = 0.0
    for piece in pieces(tensor, piece_size(tensor.numel())):
        values = piece.to(torch.float64).abs()
        values = values[values.isfinite()]
        if values.numel():
            largest = max(largest, float(values.max()))
    return largest


def _largest_difference(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """The largest |a - b| over the elements; equal elements (infinities and NaN in both
    included) count 0; None where one run has NaN and the other a number."""
    largest = 0.0
    for _, piece_a, piece_b in paired(a, b):
        x, y = piece_a.to(torch.float64), piece_b.to(torch.float64)
        same = (x == y) | (x.isnan() & y.isnan())
        if bool((x.isnan() ^ y.isnan()).any()):
            return None
        differs = torch.where(same, 0.0, (x - y).abs())
        largest = max(largest, float(differs.max()) if differs.numel() else 0.0)
    return largest
