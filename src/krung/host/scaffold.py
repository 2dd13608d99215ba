"""`krung new NAME`: a problem directory and a first Triton version that passes the ladder.

The template is a real problem (SiLU, fp32 and bf16) so the loop works before anything is
edited; replace the reference, the cases and the work counts with your own operation.
"""

from __future__ import annotations

from pathlib import Path

from krung.protocol.errors import UsageError

PROBLEM = '''"""{name}: replace this with your operation (the template computes SiLU, x * sigmoid(x))."""

import torch

description = "{name}: y = x * sigmoid(x) over a 2-D tensor (template; edit me)"


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
    {{"rows": 1, "cols": 1, "dtype": "float32"}},
    {{"rows": 3, "cols": 1000, "dtype": "float32"}},
    {{"rows": 127, "cols": 257, "dtype": "bfloat16"}},
    {{"rows": 509, "cols": 1031, "dtype": "float32"}},
]
bench_cases = [
    {{"rows": 8192, "cols": 8192, "dtype": "float32"}},
    {{"rows": 8192, "cols": 8192, "dtype": "bfloat16"}},
]
# Small enough for Triton's interpreter on a machine without a GPU.
cpu_bench_cases = [{{"rows": 256, "cols": 1024, "dtype": "float32"}}]


def _itemsize(case):
    return torch.empty((), dtype=getattr(torch, case["dtype"])).element_size()


def flops(case):
    return 4 * case["rows"] * case["cols"]  # exp, add, divide, multiply per element


def bytes_moved(case):
    return 2 * case["rows"] * case["cols"] * _itemsize(case)  # read x once, write y once
'''

VERSION = '''"""{name}, first Triton version: one program per block of elements, math in float32."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    BLOCK = 1024
    _silu[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
    return y
'''


def scaffold(name: str, parent: Path) -> Path:
    if not name.isidentifier():
        raise UsageError(f"{name!r} is not a usable problem name",
                         hint="use letters, digits and underscores, e.g. fused_silu")
    target = parent / name
    if target.exists():
        raise UsageError(f"{target} already exists", hint="choose another name or --dir")
    (target / "solutions").mkdir(parents=True)
    (target / "problem.py").write_text(PROBLEM.format(name=name))
    (target / "solutions" / "triton_v1.py").write_text(VERSION.format(name=name))
    return target
