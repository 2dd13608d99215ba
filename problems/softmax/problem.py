"""softmax: row-wise softmax over the last dimension of a 2-D tensor."""

from __future__ import annotations

import torch

description = (
    "Softmax over the last dimension of a (rows, cols) tensor, computed in float32 "
    "and returned in the input dtype."
)


# The core operation must be the version's own: no torch softmax.
forbid = ["torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax",
          "torch.Tensor.softmax", "torch.nn.Softmax"]
forbid_ops = ["_softmax", "softmax"]


def reference(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    # Subtract the row max so exp cannot overflow; softmax is unchanged by the shift.
    e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def make_inputs(case: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    shape = (case["rows"], case["cols"])
    # Scale up so rows have a real spread (peaked, not near-uniform) distributions.
    x = 3.0 * torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    return (x.to(dtype),)


test_cases = [
    {"rows": 1, "cols": 1, "dtype": "float32"},
    {"rows": 1, "cols": 7, "dtype": "float32"},
    {"rows": 5, "cols": 37, "dtype": "float32"},
    {"rows": 16, "cols": 128, "dtype": "float32"},
    {"rows": 33, "cols": 1000, "dtype": "float32"},
    {"rows": 3, "cols": 1, "dtype": "bfloat16"},
    {"rows": 17, "cols": 129, "dtype": "bfloat16"},
    {"rows": 32, "cols": 512, "dtype": "bfloat16"},
    {"rows": 7, "cols": 4099, "dtype": "bfloat16"},  # prime, just past a power of two
    {"rows": 97, "cols": 10007, "dtype": "float32"},  # large, both prime
]

bench_cases = [
    {"rows": 4096, "cols": 4096, "dtype": "float32"},
    {"rows": 8192, "cols": 8192, "dtype": "float32"},
    {"rows": 8192, "cols": 8192, "dtype": "bfloat16"},
    {"rows": 32768, "cols": 1000, "dtype": "bfloat16"},  # many short, odd-length rows
]

cpu_bench_cases = [
    {"rows": 64, "cols": 1000, "dtype": "float32"},
    {"rows": 64, "cols": 1000, "dtype": "bfloat16"},
]


def _itemsize(case: dict) -> int:
    return getattr(torch, case["dtype"]).itemsize


def flops(case: dict) -> int:
    # Per element: max compare, subtract, exp, add to the sum, divide.
    return 5 * case["rows"] * case["cols"]


def bytes_moved(case: dict) -> int:
    return 2 * case["rows"] * case["cols"] * _itemsize(case)  # read x, write out
