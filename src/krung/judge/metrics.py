"""Error metrics between a version's output and the reference's, computed in float64.

`compare` gives every figure the correctness rung reports (max absolute and relative error,
MSE, RMSE, PSNR, cosine similarity), where the mismatches are, and the verdict under a
Tolerance. NaN or Inf where the reference is finite is always a mismatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from krung.judge.tolerance import Tolerance


@dataclass
class Comparison:
    passed: bool
    figures: dict[str, Any]
    reason: str = ""  # why it failed, in words
    region: str = ""  # where the mismatches are, per dimension
    first_mismatch: list[int] | None = None
    got: float | None = None
    expected: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    out = out.to(ref.device)
    if not (ref.is_floating_point() or ref.is_complex()):
        return _compare_exact(out, ref)
    a = out.to(torch.float64)
    b = ref.to(torch.float64)
    diff = (a - b).abs()
    both_nan = a.isnan() & b.isnan()
    same_inf = a.isinf() & b.isinf() & (a == b)
    ref_finite = b.isfinite()
    bad_nonfinite = ref_finite & ~a.isfinite()
    close = (diff <= tol.atol + tol.rtol * b.abs()) | both_nan | same_inf
    mismatch = ~close | bad_nonfinite

    finite = ref_finite & a.isfinite()
    d = torch.where(finite, diff, torch.zeros_like(diff))
    n = max(int(finite.sum()), 1)
    ref_f = torch.where(finite, b, torch.zeros_like(b))
    out_f = torch.where(finite, a, torch.zeros_like(a))
    mse = float((d * d).sum()) / n
    peak = float(ref_f.abs().max()) if ref_f.numel() else 0.0
    rms_ref = math.sqrt(float((ref_f * ref_f).sum()) / n)
    floor = max(1e-3 * rms_ref, 1e-30)
    max_rel = float((d / ref_f.abs().clamp_min(floor)).max()) if d.numel() else 0.0
    norms = float(out_f.norm()) * float(ref_f.norm())
    cossim = float((out_f * ref_f).sum()) / norms if norms > 0 else (1.0 if mse == 0 else 0.0)
    psnr = None if mse == 0 else (10 * math.log10(peak * peak / mse) if peak > 0 else -math.inf)
    count = int(mismatch.sum())
    figures = {
        "max_abs_err": float(d.max()) if d.numel() else 0.0,
        "max_rel_err": max_rel,
        "mse": mse,
        "rmse": math.sqrt(mse),
        "psnr_db": psnr,
        "cossim": cossim,
        "mismatches": count,
        "nonfinite": int(bad_nonfinite.sum()),
        "elements": ref.numel(),
    }
    reasons = []
    if count:
        what = f"{count}/{ref.numel()} elements outside atol={tol.atol:g} rtol={tol.rtol:g}"
        if figures["nonfinite"]:
            what += f" ({figures['nonfinite']} NaN/Inf where the reference is finite)"
        reasons.append(what)
    if tol.min_psnr_db is not None and psnr is not None and psnr < tol.min_psnr_db:
        reasons.append(f"PSNR {psnr:.1f} dB below the {tol.min_psnr_db:g} dB the dtype needs")
    if tol.min_cossim is not None and cossim < tol.min_cossim:
        reasons.append(f"cosine similarity {cossim:.6f} below {tol.min_cossim:g}")
    result = Comparison(passed=not reasons, figures=figures, reason="; ".join(reasons))
    if count:
        _locate(result, mismatch, out, ref)
    return result


def _compare_exact(out: torch.Tensor, ref: torch.Tensor) -> Comparison:
    mismatch = out != ref
    count = int(mismatch.sum())
    figures = {"mismatches": count, "elements": ref.numel(),
               "max_abs_err": float((out.double() - ref.double()).abs().max()) if count else 0.0}
    result = Comparison(passed=count == 0, figures=figures,
                        reason=f"{count}/{ref.numel()} elements differ" if count else "")
    if count:
        _locate(result, mismatch, out, ref)
    return result


def _locate(result: Comparison, mismatch: torch.Tensor, out: torch.Tensor,
            ref: torch.Tensor) -> None:
    """The first mismatching element, and the span of mismatches along each dimension."""
    flat = int(mismatch.reshape(-1).nonzero()[0, 0])
    index = _unravel(flat, list(ref.shape))
    result.first_mismatch = index
    result.got = float(out.reshape(-1)[flat])
    result.expected = float(ref.reshape(-1)[flat])
    result.region = mismatch_region(mismatch)


def mismatch_region(mismatch: torch.Tensor) -> str:
    """Where the True elements of a mask lie: their first index and their span per dimension."""
    first = _unravel(int(mismatch.reshape(-1).nonzero()[0, 0]), list(mismatch.shape))
    spans = []
    for dim, size in enumerate(mismatch.shape):
        others = [d for d in range(mismatch.dim()) if d != dim]
        hit = mismatch.to(torch.uint8).amax(dim=others) if others else mismatch
        where = hit.nonzero().reshape(-1)
        low, high = int(where.min()), int(where.max())
        span = "all" if (low, high, len(where)) == (0, size - 1, size) else f"{low}..{high}"
        spans.append(f"dim {dim}: {span} of {size}")
    return f"first at {tuple(first)}; " + ", ".join(spans) if spans else "a scalar"


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return list(reversed(index))
