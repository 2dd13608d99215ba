"""Triton scale_shift: 2-D blocks, scale and shift loaded once per column block."""

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_shift(x_ptr, scale_ptr, shift_ptr, y_ptr, rows, cols,
                 BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r[:, None].to(tl.int64) * cols + c[None, :]
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    scale = tl.load(scale_ptr + c, mask=c < cols).to(tl.float32)
    shift = tl.load(shift_ptr + c, mask=c < cols).to(tl.float32)
    y = x * scale[None, :] + shift[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x, scale, shift):
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    BR, BC = 16, 256
    _scale_shift[(triton.cdiv(rows, BR), triton.cdiv(cols, BC))](
        x, scale, shift, y, rows, cols, BR=BR, BC=BC)
    return y
