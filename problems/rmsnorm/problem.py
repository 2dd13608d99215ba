"""rmsnorm: RMS normalization of each row of a bf16 tensor, scaled by a per-column weight."""

from __future__ import annotations

import torch

description = (
    "RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + 1e-6) * w, for bf16 x of shape "
    "(rows, cols) and bf16 weight w of shape (cols,); computed in float32, returned in bf16."
)

EPS = 1e-6


# The core operation must be the version's own: no torch RMSNorm.
forbid = ["torch.rms_norm", "torch.nn.functional.rms_norm", "torch.nn.RMSNorm"]
forbid_ops = ["rms_norm", "_fused_rms_norm"]


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    rms = torch.sqrt(xf.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (xf / rms * w.float()).to(x.dtype)


def make_inputs(case: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    rows, cols = case["rows"], case["cols"]
    x = torch.randn(rows, cols, generator=g, device=device, dtype=torch.float32)
    # A trained-looking weight: near 1 but not all ones, so a kernel that ignores it fails.
    w = 1.0 + 0.2 * torch.randn(cols, generator=g, device=device, dtype=torch.float32)
    return x.to(dtype), w.to(dtype)


test_cases = [
    {"rows": 1, "cols": 1, "dtype": "bfloat16"},
    {"rows": 1, "cols": 17, "dtype": "bfloat16"},
    {"rows": 3, "cols": 129, "dtype": "bfloat16"},
    {"rows": 16, "cols": 256, "dtype": "bfloat16"},
    {"rows": 37, "cols": 1000, "dtype": "bfloat16"},
    {"rows": 24, "cols": 768, "dtype": "bfloat16"},  # common hidden size, not a power of two
    {"rows": 5, "cols": 5003, "dtype": "bfloat16"},  # prime, long rows
    {"rows": 41, "cols": 12289, "dtype": "bfloat16"},  # large rows, both prime
]

bench_cases = [
    {"rows": 4096, "cols": 4096, "dtype": "bfloat16"},
    {"rows": 16384, "cols": 8192, "dtype": "bfloat16"},
    {"rows": 65536, "cols": 5120, "dtype": "bfloat16"},  # hidden size not a power of two
]

cpu_bench_cases = [
    {"rows": 64, "cols": 1000, "dtype": "bfloat16"},
]


def _itemsize(case: dict) -> int:
    return getattr(torch, case["dtype"]).itemsize


def flops(case: dict) -> int:
    rows, cols = case["rows"], case["cols"]
    # Per element: square, add to the sum, divide by the rms, multiply by w.
    # Per row: divide by cols, add eps, sqrt.
    return 4 * rows * cols + 3 * rows


def bytes_moved(case: dict) -> int:
    rows, cols = case["rows"], case["cols"]
    return (2 * rows * cols + cols) * _itemsize(case)  # read x and w, write y
