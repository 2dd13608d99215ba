"""{{title}}, version 1, in Triton: one program per block of elements, math in float32.

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs. On a GPU they are CUDA tensors and the first
call JIT-compiles the @triton.jit function; on a machine without a GPU they are CPU tensors and
the kernel runs under Triton's interpreter (TRITON_INTERPRET=1): slow, but the same logic.
{{state}}
{{checks}}
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # One program per BLOCK elements; the mask covers the ragged end.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def silu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    BLOCK = 1024
    _silu[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
    return y


# {{entry}}
