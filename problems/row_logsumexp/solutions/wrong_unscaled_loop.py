"""Wrong on purpose, in the path for rows wider than 8192 only: the running sum is not
rescaled when the maximum grows. Every test case is narrower; the bench case 4096x32768 is
not: on a CPU krung checks its shape at 16x32768 and the version fails there."""

import torch
import triton
import triton.language as tl

MAX_BLOCK = 8192


@triton.jit
def _lse_one_block(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=-float("inf")).to(tl.float32)
    top = tl.max(x, axis=0)
    total = tl.sum(tl.exp(x - top), axis=0)
    tl.store(y_ptr + row, (top + tl.log(total)).to(y_ptr.dtype.element_ty))


@triton.jit
def _lse_looped(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    top = -float("inf")
    total = 0.0
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=-float("inf")).to(tl.float32)
        new_top = tl.maximum(top, tl.max(x, axis=0))
        total = total + tl.sum(tl.exp(x - new_top), axis=0)
        top = new_top
    tl.store(y_ptr + row, (top + tl.log(total)).to(y_ptr.dtype.element_ty))


def kernel(x):
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty(rows, dtype=x.dtype, device=x.device)
    if cols <= MAX_BLOCK:
        _lse_one_block[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
    else:
        _lse_looped[(rows,)](x, y, cols, BLOCK=MAX_BLOCK)
    return y
