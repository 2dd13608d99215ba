"""vectoradd in Triton, writing into the output buffer it is given."""

import triton
import triton.language as tl
from task import input_t, output_t


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(c_ptr + offsets, a + b, mask=mask)


def custom_kernel(data: input_t) -> output_t:
    a, b, c = data
    n = c.numel()
    add_kernel[(triton.cdiv(n, 4096),)](a, b, c, n, BLOCK=4096)
    return c
