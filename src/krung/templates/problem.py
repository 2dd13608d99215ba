"""{{name}}: replace this with your operation (the template computes SiLU, x * sigmoid(x))."""

import torch

description = "{{name}}: y = x * sigmoid(x) over a 2-D tensor (template; edit me)"


def reference(x):
    """The slow, clear definition: computed in float32, returned in the input's dtype."""
    xf = x.float()
    return (xf * torch.sigmoid(xf)).to(x.dtype)


def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(case["rows"], case["cols"], generator=g, device=device)
    return (x.to(getattr(torch, case["dtype"])),)


# Awkward sizes on purpose: a tiny one, non-powers of two, primes, and a large one.
test_cases = [
    {"rows": 1, "cols": 1, "dtype": "float32"},
    {"rows": 3, "cols": 1000, "dtype": "float32"},
    {"rows": 127, "cols": 257, "dtype": "bfloat16"},
    {"rows": 509, "cols": 1031, "dtype": "float32"},
]
bench_cases = [
    {"rows": 8192, "cols": 8192, "dtype": "float32"},
    {"rows": 8192, "cols": 8192, "dtype": "bfloat16"},
]
# Small enough for Triton's interpreter on a machine without a GPU.
cpu_bench_cases = [{"rows": 256, "cols": 1024, "dtype": "float32"}]


def _itemsize(case):
    return torch.empty((), dtype=getattr(torch, case["dtype"])).element_size()


def flops(case):
    return 4 * case["rows"] * case["cols"]  # exp, add, divide, multiply per element


def bytes_moved(case):
    return 2 * case["rows"] * case["cols"] * _itemsize(case)  # read x once, write y once
