"""Error metrics and verdicts on fresh random tensors."""

from __future__ import annotations

import math

import pytest
import torch

from krung.judge.metrics import compare
from krung.judge.tolerance import DEFAULTS, Tolerance


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(torch.seed())


def test_identical_outputs_pass_with_zero_error(rng):
    ref = torch.randn(37, 101, generator=rng)
    result = compare(ref.clone(), ref, DEFAULTS["float32"])
    assert result.passed
    assert result.figures["max_abs_err"] == 0 and result.figures["mse"] == 0
    assert result.figures["psnr_db"] is None  # exact: no finite PSNR
    assert result.figures["cossim"] == pytest.approx(1.0)


def test_figures_match_their_definitions(rng):
    ref = torch.randn(1000, generator=rng, dtype=torch.float64)
    noise = 1e-3 * torch.randn(1000, generator=rng, dtype=torch.float64)
    result = compare(ref + noise, ref, Tolerance(atol=1e-2, rtol=0))
    f = result.figures
    assert f["max_abs_err"] == pytest.approx(float(noise.abs().max()))
    mse = float((noise ** 2).mean())
    assert f["mse"] == pytest.approx(mse)
    assert f["rmse"] == pytest.approx(math.sqrt(mse))
    assert f["psnr_db"] == pytest.approx(10 * math.log10(float(ref.abs().max()) ** 2 / mse))
    cos = float((ref + noise) @ ref / ((ref + noise).norm() * ref.norm()))
    assert f["cossim"] == pytest.approx(cos)
    assert result.passed


def test_one_bad_element_fails_and_is_located(rng):
    ref = torch.randn(64, 300, generator=rng)
    out = ref.clone()
    out[17, 299] += 1.0
    result = compare(out, ref, DEFAULTS["float32"])
    assert not result.passed
    assert result.figures["mismatches"] == 1
    assert result.first_mismatch == [17, 299]
    assert result.got == pytest.approx(float(out[17, 299]))
    assert result.expected == pytest.approx(float(ref[17, 299]))
    assert result.region == "first at (17, 299); dim 0: 17..17 of 64, dim 1: 299..299 of 300"


def test_nan_where_reference_is_finite_never_passes(rng):
    ref = torch.randn(100, generator=rng)
    out = ref.clone()
    out[5] = float("nan")
    result = compare(out, ref, Tolerance(atol=1e9, rtol=1e9))
    assert not result.passed
    assert result.figures["nonfinite"] == 1
    assert "NaN/Inf" in result.reason


def test_matching_nan_and_inf_in_the_reference_pass(rng):
    ref = torch.randn(10, generator=rng)
    ref[2] = float("nan")
    ref[3] = float("inf")
    assert compare(ref.clone(), ref, DEFAULTS["float32"]).passed


def test_bf16_rounding_passes_but_systematic_bias_fails_on_psnr(rng):
    exact = torch.randn(256, 512, generator=rng)
    ref = exact.to(torch.bfloat16)
    rounded = (exact + 1e-4 * torch.randn(256, 512, generator=rng)).to(torch.bfloat16)
    assert compare(rounded, ref, DEFAULTS["bfloat16"]).passed
    # Every element inside atol, but all shifted: PSNR and cosine similarity catch it.
    policy = Tolerance(atol=0.5, rtol=0, min_psnr_db=35, min_cossim=0.999)
    shifted = (exact + 0.4).to(torch.bfloat16)
    result = compare(shifted, ref, policy)
    assert not result.passed
    assert "PSNR" in result.reason


def test_integer_outputs_are_compared_exactly(rng):
    ref = torch.randint(0, 100, (50,), generator=rng)
    out = ref.clone()
    assert compare(out, ref, DEFAULTS["float32"]).passed
    out[49] += 1
    result = compare(out, ref, DEFAULTS["float32"])
    assert not result.passed and result.first_mismatch == [49]
