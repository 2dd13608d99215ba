"""Triton vector add with @triton.autotune: the block size and warps are chosen per size.

krung tunes before it times: the benchmark rung calls the version once per input set before
the timed calls, so the autotuner's own benchmarking never lands in a timed call, and the
config it chose for each bench case is recorded (`config` in the benchmark's per-case table).
On a machine without a GPU the autotuner times the configs under the interpreter instead.
"""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 256}, num_warps=2),
        triton.Config({"BLOCK": 1024}, num_warps=4),
        triton.Config({"BLOCK": 4096}, num_warps=8),
    ],
    key=["n"],  # tuned again for every distinct length
)
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
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](a, b, out, n)
    return out
