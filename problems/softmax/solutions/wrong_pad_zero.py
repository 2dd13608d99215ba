"""Deliberately wrong softmax: padding lanes load 0 instead of -inf.

Each padding lane then adds exp(0 - max) to the denominator, so rows whose length is not
a power of two come out too small. Rows of exactly 2**k columns have no padding and pass.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)  # BUG: should be -inf
    x = x.to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def kernel(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(cols)
    num_warps = 4 if BLOCK <= 1024 else 8 if BLOCK <= 4096 else 16
    softmax_kernel[(rows,)](
        x, out, x.stride(0), out.stride(0), cols, BLOCK=BLOCK, num_warps=num_warps
    )
    return out
