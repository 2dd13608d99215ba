"""matmul: bf16 matrix product with float32 accumulation and a bf16 result."""

from __future__ import annotations

import torch

description = (
    "Matrix product C = A @ B of bf16 A (M, K) and bf16 B (K, N), accumulated in float32 "
    "and returned as bf16 (M, N)."
)


# The core operation must be the version's own: no torch or vendor matrix products.
forbid = ["torch.matmul", "torch.mm", "torch.bmm", "torch.einsum", "torch.nn.functional.linear",
          "torch.Tensor.matmul", "torch.Tensor.mm", "torch.Tensor.__matmul__"]
forbid_ops = ["mm", "bmm", "addmm", "baddbmm", "matmul", "_scaled_mm", "linear"]


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).to(torch.bfloat16)


def make_inputs(case: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    M, N, K = case["M"], case["N"], case["K"]
    a = torch.randn(M, K, generator=g, device=device, dtype=torch.float32)
    b = torch.randn(K, N, generator=g, device=device, dtype=torch.float32)
    return a.to(dtype), b.to(dtype)


test_cases = [
    {"M": 1, "N": 1, "K": 1, "dtype": "bfloat16"},
    {"M": 1, "N": 257, "K": 64, "dtype": "bfloat16"},  # one row, prime N
    {"M": 64, "N": 64, "K": 64, "dtype": "bfloat16"},
    {"M": 128, "N": 256, "K": 128, "dtype": "bfloat16"},
    {"M": 33, "N": 17, "K": 5, "dtype": "bfloat16"},  # K smaller than one K block
    {"M": 200, "N": 129, "K": 300, "dtype": "bfloat16"},  # K not a multiple of the K block
    {"M": 131, "N": 67, "K": 1031, "dtype": "bfloat16"},  # primes, long K
    {"M": 509, "N": 383, "K": 257, "dtype": "bfloat16"},  # large, all prime
]

bench_cases = [
    {"M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16"},
    {"M": 8192, "N": 8192, "K": 8192, "dtype": "bfloat16"},
    {"M": 8192, "N": 7168, "K": 2048, "dtype": "bfloat16"},  # wide, shorter K
]

cpu_bench_cases = [
    {"M": 256, "N": 256, "K": 256, "dtype": "bfloat16"},
]


def _itemsize(case: dict) -> int:
    return getattr(torch, case["dtype"]).itemsize


def flops(case: dict) -> int:
    return 2 * case["M"] * case["N"] * case["K"]  # one multiply and one add per term


def bytes_moved(case: dict) -> int:
    M, N, K = case["M"], case["N"], case["K"]
    return (M * K + K * N + M * N) * _itemsize(case)  # read A and B once, write C once
