"""Triton logsumexp: one block per row up to 8192 columns; wider rows loop over blocks of
8192 with an online maximum (two code paths, chosen by the row's width)."""

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
        total = total * tl.exp(top - new_top) + tl.sum(tl.exp(x - new_top), axis=0)
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
