"""mish: x * tanh(softplus(x)), two activations fused."""

from __future__ import annotations

import torch

description = "Mish, x * tanh(softplus(x)), in float32, returned in x's dtype."

forbid = ["torch.nn.functional.mish", "torch.nn.Mish"]
forbid_ops = ["mish"]


def reference(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.tanh(torch.nn.functional.softplus(xf))).to(x.dtype)


def make_inputs(case: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = 3 * torch.randn(case["n"], generator=g, device=device)
    return (x.to(getattr(torch, case["dtype"])),)


test_cases = [{"n": n, "dtype": d} for n in (1, 7, 1000, 4099, 65537)
              for d in ("float32", "bfloat16")]
bench_cases = [{"n": 1 << 26, "dtype": "bfloat16"}, {"n": 1 << 25, "dtype": "float32"}]


def flops(case: dict) -> int:
    return 8 * case["n"]


def bytes_moved(case: dict) -> int:
    return 2 * case["n"] * getattr(torch, case["dtype"]).itemsize
