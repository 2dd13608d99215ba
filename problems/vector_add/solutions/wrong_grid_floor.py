"""Deliberately wrong vector add: the grid rounds n / BLOCK down, so the tail is never written.

Correct whenever n is a multiple of BLOCK (e.g. 4096); wrong for any other n.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + b, mask=mask)


def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    n = a.numel()
    BLOCK = 1024
    grid = (n // BLOCK,)  # BUG: should be triton.cdiv(n, BLOCK)
    add_kernel[grid](a, b, out, n, BLOCK=BLOCK, num_warps=4)
    return out
