"""scale_shift: y = x * scale + shift, scale and shift broadcast over the rows (an affine
layer's elementwise tail)."""

from __future__ import annotations

import torch

description = "x (rows, cols) times scale (cols,) plus shift (cols,), in float32, returned in x's dtype."


def reference(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return (x.float() * scale.float() + shift.float()).to(x.dtype)


def make_inputs(case: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    rows, cols = case["rows"], case["cols"]
    x = torch.randn(rows, cols, generator=g, device=device).to(dtype)
    scale = (1 + torch.rand(cols, generator=g, device=device)).to(dtype)
    shift = torch.randn(cols, generator=g, device=device).to(dtype)
    return x, scale, shift


test_cases = [{"rows": r, "cols": c, "dtype": d}
              for r, c in ((1, 1), (3, 7), (17, 129), (64, 1000), (5, 4099))
              for d in ("float32", "bfloat16")]
bench_cases = [{"rows": 8192, "cols": 8192, "dtype": "bfloat16"},
               {"rows": 16384, "cols": 4096, "dtype": "float32"}]


def flops(case: dict) -> int:
    return 2 * case["rows"] * case["cols"]


def bytes_moved(case: dict) -> int:
    size = getattr(torch, case["dtype"]).itemsize
    return (2 * case["rows"] * case["cols"] + 2 * case["cols"]) * size
