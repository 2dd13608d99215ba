"""vector_add: elementwise sum of two fp32 vectors, the smallest memory-bound problem."""

from __future__ import annotations

import torch

description = "Elementwise sum of two 1-D float32 vectors: out = a + b."


# The core operation must be the version's own: no torch addition.
forbid = ["torch.add", "torch.Tensor.add", "torch.Tensor.__add__"]
forbid_ops = ["add"]


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def make_inputs(case: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    n = case["n"]
    a = torch.randn(n, generator=g, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn(n, generator=g, device=device, dtype=torch.float32).to(dtype)
    return a, b


test_cases = [
    {"n": 1, "dtype": "float32"},
    {"n": 7, "dtype": "float32"},
    {"n": 1000, "dtype": "float32"},
    {"n": 4096, "dtype": "float32"},
    {"n": 65537, "dtype": "float32"},  # prime, one past a power of two
    {"n": 300_007, "dtype": "float32"},  # large prime
]

bench_cases = [
    {"n": 2**24, "dtype": "float32"},
    {"n": 2**28, "dtype": "float32"},
]

cpu_bench_cases = [
    {"n": 2**18, "dtype": "float32"},
]


def _itemsize(case: dict) -> int:
    return getattr(torch, case["dtype"]).itemsize


def flops(case: dict) -> int:
    return case["n"]  # one add per element


def bytes_moved(case: dict) -> int:
    return 3 * case["n"] * _itemsize(case)  # read a and b, write out
