"""Triton Mish with libdevice's tanh, as written for the GPU (krung runs libdevice under
the interpreter on a CPU). softplus(x) = max(x, 0) + log1p(exp(-|x|)) cannot overflow."""

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _mish(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n).to(tl.float32)
    softplus = tl.maximum(x, 0.0) + libdevice.log1p(tl.exp(-tl.abs(x)))
    tl.store(y_ptr + i, (x * libdevice.tanh(softplus)).to(y_ptr.dtype.element_ty), mask=i < n)


def kernel(x):
    y = torch.empty_like(x)
    _mish[(triton.cdiv(x.numel(), 2048),)](x, y, x.numel(), BLOCK=2048)
    return y
