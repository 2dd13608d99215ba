"""A reference apart from itself by rounding only (krung.judge.spread): told from one apart
by design, and the allowance it gives at an output's scale."""

import math

import pytest
import torch

from krung.judge.spread import MARGIN, ROUNDING_ULPS, allowance, rounding_spread

EPS = torch.finfo(torch.float32).eps


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))


def _apart(reference, ulps, rng, where=0.001):
    """The reference with a few elements moved by about `ulps` ulps of its largest magnitude
    (the sum rounds to the element's own precision: up to half an ulp of it off)."""
    moved = reference.clone()
    chosen = torch.rand(reference.shape, generator=rng) < where
    chosen.view(-1)[0] = True
    moved[chosen] += ulps * EPS * float(reference.abs().max())
    return moved


def test_a_few_ulps_of_the_largest_output_are_rounding(rng):
    reference = torch.randn(300, 700, generator=rng)
    [spread] = rounding_spread([reference], [_apart(reference, 8, rng)])
    assert spread == pytest.approx(8 * EPS, rel=0.1)
    assert allowance(reference, spread) == pytest.approx(
        MARGIN * 8 * EPS * float(reference.abs().max()), rel=0.1)


def test_a_difference_past_rounding_is_by_design_and_none_is_no_spread(rng):
    reference = torch.randn(300, 700, generator=rng)
    assert rounding_spread([reference], [_apart(reference, 4 * ROUNDING_ULPS, rng)]) is None
    dropped = reference * (torch.rand(reference.shape, generator=rng) < 0.5) * 2
    assert rounding_spread([reference], [dropped]) is None  # dropout
    assert rounding_spread([reference], [reference.clone()]) is None
    assert allowance(reference, 0.0) == 0.0


def test_every_output_must_be_rounding_and_nan_must_match(rng):
    a, b = torch.randn(1000, generator=rng), torch.randn(50, generator=rng)
    assert rounding_spread([a, b], [_apart(a, 2, rng), b.clone()]) == [
        pytest.approx(2 * EPS, rel=0.1), 0.0]
    assert rounding_spread([a, b], [_apart(a, 2, rng), b * 3]) is None
    with_nan = a.clone()
    with_nan[7] = math.nan
    assert rounding_spread([with_nan], [_apart(with_nan.nan_to_num(0), 2, rng)]) is None
    both = _apart(a, 2, rng)
    both[7] = math.nan
    assert rounding_spread([with_nan], [both]) is not None
    integers = torch.randint(0, 9, (100,), generator=rng)
    assert rounding_spread([integers], [integers + 1]) is None
