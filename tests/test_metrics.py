"""Error metrics and verdicts on fresh random tensors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

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


# The comparison streams over pieces of the outputs. The figures must be those of the whole-
# tensor comparison in float64 krung made before (`_whole_tensor` below keeps it as the
# oracle): counts, maxima and locations exactly, sums to rounding.

def _whole_tensor(out, ref, tol):
    """The figures of one comparison made over the whole tensors at once."""
    a, b = out.to(torch.float64), ref.to(torch.float64)
    diff = (a - b).abs()
    ref_finite = b.isfinite()
    ref_rms = math.sqrt(float(b[ref_finite].square().mean()))
    atol = tol.atol * min(1.0, ref_rms)  # scaled to the reference's RMS below 1
    bad = ref_finite & ~a.isfinite()
    close = ((diff <= atol + tol.rtol * b.abs()) | (a.isnan() & b.isnan())
             | (a.isinf() & b.isinf() & (a == b)))
    mismatch = ~close | bad
    finite = ref_finite & a.isfinite()
    d = torch.where(finite, diff, torch.zeros_like(diff))
    n = max(int(finite.sum()), 1)
    ref_f = torch.where(finite, b, torch.zeros_like(b))
    out_f = torch.where(finite, a, torch.zeros_like(a))
    mse = float((d * d).sum()) / n
    rms = math.sqrt(float((ref_f * ref_f).sum()) / n)
    norms = float(out_f.norm()) * float(ref_f.norm())
    peak = float(ref_f.abs().max())
    flat = mismatch.reshape(-1).nonzero().reshape(-1)
    spans = []
    for dim, size in enumerate(mismatch.shape):
        others = [x for x in range(mismatch.dim()) if x != dim]
        hit = mismatch.to(torch.uint8).amax(dim=others) if others else mismatch
        where = hit.nonzero().reshape(-1) if len(flat) else None
        if where is not None:
            low, high = int(where.min()), int(where.max())
            whole = (low, high, len(where)) == (0, size - 1, size)
            spans.append(f"dim {dim}: {'all' if whole else f'{low}..{high}'} of {size}")
    return {
        "max_abs_err": float(d.max()),
        "max_rel_err": float((d / ref_f.abs().clamp_min(max(1e-3 * rms, 1e-30))).max()),
        "mse": mse, "rmse": math.sqrt(mse),
        "psnr_db": None if mse == 0 else 10 * math.log10(peak * peak / mse),
        "cossim": float((out_f * ref_f).sum()) / norms,
        "mismatches": int(mismatch.sum()), "nonfinite": int(bad.sum()),
        "first": [int(i) for i in torch.unravel_index(flat[0], mismatch.shape)] if len(flat)
        else None,
        "spans": ", ".join(spans),
    }


def _spoiled(rng, shape, dtype, bad: int):
    """A random reference and an output close to it with `bad` elements spoiled (far off,
    NaN, Inf), and some NaN and Inf the reference itself holds."""
    ref = torch.randn(shape, generator=rng).to(dtype)
    out = (ref.float() + 1e-6 * torch.randn(shape, generator=rng)).to(dtype)
    flat_ref, flat_out = ref.view(-1), out.view(-1)
    spots = torch.randperm(ref.numel(), generator=rng)[:bad + 2]
    flat_ref[spots[0]] = flat_out[spots[0]] = float("nan")
    flat_ref[spots[1]] = flat_out[spots[1]] = float("-inf")
    for k, spot in enumerate(spots[2:].tolist()):
        flat_out[spot] = (float("nan"), float("inf"), 5.0 + k)[k % 3]
    return out, ref


@pytest.mark.parametrize("shape, dtype", [
    ((37, 101), torch.float32), ((4, 9, 33, 7), torch.float16), ((70001,), torch.bfloat16),
    ((3, 1, 5000), torch.float64)])
@pytest.mark.parametrize("pieces", ["one", "many"])
def test_streamed_figures_are_the_whole_tensor_figures(rng, monkeypatch, shape, dtype, pieces):
    from krung.judge import metrics

    if pieces == "many":  # pieces of 1000 elements: rows of every shape split and recurse
        monkeypatch.setattr(metrics, "MIN_PIECE", 1000)
        monkeypatch.setattr(metrics, "MAX_PIECE", 1000)
    tol = DEFAULTS["float32"]
    out, ref = _spoiled(rng, shape, dtype, bad=int(torch.randint(1, 30, (1,), generator=rng)))
    result = compare(out, ref, tol)
    oracle = _whole_tensor(out, ref, tol)
    figures = result.figures
    for key in ("max_abs_err", "mismatches", "nonfinite"):
        assert figures[key] == oracle[key], key
    for key in ("max_rel_err", "mse", "rmse", "psnr_db", "cossim"):
        assert figures[key] == pytest.approx(oracle[key], rel=1e-12), key
    assert result.first_mismatch == oracle["first"]
    assert result.region == f"first at {tuple(oracle['first'])}; {oracle['spans']}"
    assert result.got == pytest.approx(float(out.reshape(-1)[out.numel() and
                                                              _flat(oracle['first'], shape)]),
                                       nan_ok=True)
    assert not result.passed and f"{oracle['mismatches']}/{ref.numel()} elements" in result.reason


def test_all_finite_pieces_give_the_whole_tensor_figures(rng, monkeypatch):
    """Pieces with no NaN or Inf take the path without masks (four dot products): the same
    figures and the same mismatches, located, as the whole tensor's."""
    from krung.judge import metrics

    monkeypatch.setattr(metrics, "MIN_PIECE", 997)
    monkeypatch.setattr(metrics, "MAX_PIECE", 997)
    ref = torch.randn(61, 503, generator=rng) * 0.05
    out = ref + 1e-7 * torch.randn(61, 503, generator=rng)
    spots = torch.randperm(ref.numel(), generator=rng)[:int(torch.randint(1, 20, (1,),
                                                                          generator=rng))]
    out.view(-1)[spots] += 0.5
    tol = DEFAULTS["float32"]
    result = compare(out, ref, tol)
    oracle = _whole_tensor(out, ref, tol)
    assert result.figures["mismatches"] == oracle["mismatches"] == len(spots)
    assert result.figures["max_abs_err"] == oracle["max_abs_err"]
    for key in ("max_rel_err", "mse", "rmse", "psnr_db", "cossim"):
        assert result.figures[key] == pytest.approx(oracle[key], rel=1e-12), key
    assert result.first_mismatch == oracle["first"]
    assert result.region == f"first at {tuple(oracle['first'])}; {oracle['spans']}"


def _flat(index, shape):
    flat = 0
    for i, size in zip(index, shape, strict=True):
        flat = flat * size + i
    return flat


def test_a_mismatch_in_the_last_piece_is_found_and_located(rng, monkeypatch):
    from krung.judge import metrics

    monkeypatch.setattr(metrics, "MIN_PIECE", 4096)
    monkeypatch.setattr(metrics, "MAX_PIECE", 4096)
    ref = torch.randn(64, 1000, 3, generator=rng)
    out = ref.clone()
    out[63, 999, 2] += 1.0  # the very last element, in the last of many pieces
    result = compare(out, ref, DEFAULTS["float32"])
    assert not result.passed and result.figures["mismatches"] == 1
    assert result.first_mismatch == [63, 999, 2]
    assert result.region == ("first at (63, 999, 2); dim 0: 63..63 of 64, dim 1: 999..999 "
                             "of 1000, dim 2: 2..2 of 3")
    assert result.got == pytest.approx(float(out[63, 999, 2]))
    exact = torch.randint(0, 9, (50, 4000), generator=rng)
    changed = exact.clone()
    changed[49, 3999] += 1
    result = compare(changed, exact, DEFAULTS["float32"])
    assert result.first_mismatch == [49, 3999] and result.figures["max_abs_err"] == 1


def test_strided_outputs_compare_like_contiguous_ones(rng, monkeypatch):
    from krung.judge import metrics

    monkeypatch.setattr(metrics, "MIN_PIECE", 500)
    monkeypatch.setattr(metrics, "MAX_PIECE", 500)
    base = torch.randn(300, 200, generator=rng)
    ref = base.t()  # not contiguous
    out = ref.contiguous().clone()
    out[150, 7] = float("nan")
    strided, dense = compare(out, ref, DEFAULTS["float32"]), compare(out, ref.contiguous(),
                                                                      DEFAULTS["float32"])
    assert strided.figures == dense.figures
    assert strided.first_mismatch == dense.first_mismatch == [150, 7]


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc")
def test_comparing_a_large_output_takes_at_most_twice_its_size(tmp_path):
    """The judge compared in float64 over the whole output (~18x its size) and was killed on
    KernelBench's largest outputs; streamed, the peak memory grows by at most 2x."""
    script = tmp_path / "peak.py"
    script.write_text(textwrap.dedent("""
        import torch
        from krung.judge.metrics import compare
        from krung.judge.tolerance import DEFAULTS

        def peak():  # the process's peak resident memory, which clear_refs resets
            with open("/proc/self/status") as status:
                line = next(x for x in status if x.startswith("VmHWM"))
            return int(line.split()[1]) * 1024

        g = torch.Generator().manual_seed(7)
        ref = torch.randn(2048, 8192, generator=g)  # 64 MiB
        out = ref + 1e-6 * torch.randn(2048, 8192, generator=g)
        out[2047, 8191] = 3.0
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        before = peak()
        result = compare(out, ref, DEFAULTS["float32"])
        assert result.figures["mismatches"] == 1, result.figures
        print((peak() - before) / (ref.numel() * 4))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    growth = float(done.stdout.strip())
    assert growth <= 2.0, f"peak memory grew by {growth:.2f}x the output's size"


# The atol scales with the reference's RMS below 1 (krung.judge.tolerance): an absolute atol
# alone passes zeros, or a constant, on outputs whose values all lie below it.

def test_a_constant_passes_no_wide_softmax_and_an_honest_one_does(rng):
    x = torch.rand(4, 100_000, generator=rng)  # as KernelBench's 23_Softmax draws them
    ref = torch.softmax(x, dim=-1)
    assert float(ref.max()) < 1e-4  # every value below the atol
    constant = torch.full_like(ref, 1 / ref.shape[-1])
    for cheat in (constant, torch.zeros_like(ref)):
        result = compare(cheat, ref, DEFAULTS["float32"])
        assert not result.passed
        assert "x the reference's RMS" in result.reason
        assert result.figures["atol"] < 1e-4 * 0.1
        # the bare absolute atol would have passed it
        assert compare(cheat, ref, Tolerance(atol=1e-4, rtol=1e-4, scale_atol=False)).passed
    e = torch.exp(x.double() - x.double().amax(-1, keepdim=True))  # another order, in float64
    honest = (e / e.sum(-1, keepdim=True)).float()
    assert compare(honest, ref, DEFAULTS["float32"]).passed


def test_zeros_fail_on_small_outputs_and_honest_rounding_passes_at_any_scale(rng):
    for scale in (1e-3, 1e-6, 1e-12):
        exact = scale * torch.randn(300, 70, generator=rng, dtype=torch.float64)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            if dtype == torch.float16 and scale < 1e-3:
                continue  # below float16's normal range: no honest rounding to compare
            ref = exact.to(dtype)
            policy = DEFAULTS[str(dtype).removeprefix("torch.")]
            wobble = torch.rand(exact.shape, generator=rng, dtype=torch.float64) - 0.5
            # an honest version: off by up to a unit in the last place
            rounded = (exact * (1 + torch.finfo(dtype).eps * wobble)).to(dtype)
            assert compare(rounded, ref, policy).passed, (scale, dtype)
            assert not compare(torch.zeros_like(ref), ref, policy).passed, (scale, dtype)


def test_the_atol_is_the_policys_above_rms_one_and_a_zero_reference_needs_zeros(rng):
    ref = 10 * torch.randn(1000, generator=rng)
    assert compare(ref, ref, DEFAULTS["float32"]).figures["atol"] == 1e-4
    shifted = ref + 0.9e-4  # within the policy's own atol: as before
    assert compare(shifted, ref, DEFAULTS["float32"]).passed
    zero = torch.zeros(1000)
    assert compare(zero.clone(), zero, DEFAULTS["float32"]).passed
    tiny = torch.full((1000,), torch.finfo(torch.float32).tiny / 2)  # a denormal: not zero
    assert compare(tiny, zero, DEFAULTS["float32"]).passed
    assert not compare(torch.full((1000,), 1e-30), zero, DEFAULTS["float32"]).passed


# Where the mismatches lie says which bug left them (the correctness rung's hint reads it).

def _pattern_of(shape, spoil, rng):
    ref = torch.randn(*shape, generator=rng)
    out = ref.clone()
    spoil(out)
    return compare(out, ref, DEFAULTS["float32"]).pattern


@pytest.mark.parametrize("spoil, says", [
    (lambda o: o[:, -13:].add_(1), "only the last 13 of 1000 indices of dim 1: the tail"),
    (lambda o: o[-1, -1].add_(1), "a single element, at (6, 999)"),
    (lambda o: o[4].add_(1), "only index 4 of 7 of dim 0 (one row or column)"),
    (lambda o: o[:, 3::64].add_(1), "every 64th index of dim 1, from 3: a stride"),
    (lambda o: o[:, :128].add_(1), "only the first 128 of 1000 indices of dim 1: the first block"),
])
def test_the_mismatch_pattern_names_the_bug_it_looks_like(rng, spoil, says):
    assert _pattern_of((7, 1000), spoil, rng).startswith(says)


@pytest.mark.parametrize("spoil, says", [
    (lambda o: o[5::3].add_(1), "every 3th index of dim 0, from 5: a stride"),
    (lambda o: o[-1000:].add_(1), "only the last 1000 of 3000000 indices of dim 0: the tail"),
    (lambda o: o[:4096].add_(1), "only the first 4096 of 3000000 indices of dim 0"),
])
def test_a_long_flat_output_with_millions_of_mismatches_has_its_pattern(rng, spoil, says):
    # a bench case's prefix sum in float32 against a float64 reference: the hits lie in one
    # dimension, where the pattern used to be worked out in a Python list of every index
    assert _pattern_of((3_000_000,), spoil, rng).startswith(says)


def test_a_flat_output_wrong_almost_everywhere_has_no_pattern(rng):
    def noise(out):
        out.add_(torch.randn(out.shape, generator=rng) * 1e-2)
    assert _pattern_of((3_000_000,), noise, rng) is None


def test_scattered_mismatches_have_no_pattern(rng):
    def scatter(out):
        out[torch.randperm(64, generator=rng)[:5], torch.randperm(1000, generator=rng)[:5]] += 1
    assert _pattern_of((64, 1000), scatter, rng) is None


@pytest.mark.parametrize("shape", [(3, 700_001), (1 << 18,), (5, 7, 11)])
def test_the_run_rungs_nonfinite_count_piece_by_piece_is_the_whole_count(shape):
    """The run rung counts an output's NaN/Inf where the reference is finite in pieces (at
    declared sizes the whole masks held copies of a 6 GiB output): the same count."""
    from krung.judge.rungs.run import _nonfinite_where_finite

    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
    out = torch.randn(shape, generator=generator)
    ref = torch.randn(shape, generator=generator)
    flat_out, flat_ref = out.view(-1), ref.view(-1)
    for values, flat in ((float("nan"), flat_out), (float("inf"), flat_out),
                         (float("-inf"), flat_ref), (float("nan"), flat_ref)):
        spots = torch.randint(0, flat.numel(), (int(torch.randint(1, 50, (1,))),),
                              generator=generator)
        flat[spots] = values
    whole = int((~out.isfinite() & ref.isfinite()).sum())
    assert whole > 0
    assert _nonfinite_where_finite(out, ref) == whole
    # another shape (a problem whose own check decides): counted whole, broadcasting
    assert _nonfinite_where_finite(out, ref[..., :1]) == int(
        (~out.isfinite() & ref[..., :1].isfinite()).sum())
