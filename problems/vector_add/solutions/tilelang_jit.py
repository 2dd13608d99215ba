"""TileLang vector add (tilelang 0.1.x): a T.prim_func compiled by @tilelang.jit.

One block of THREADS threads per BLOCK elements; T.Parallel spreads the block's elements over
the threads, the guard covers the ragged end. The length is symbolic (T.dynamic), so one
compile serves every length; `out_idx=[-1]` makes TileLang allocate and return the output.
"""

import tilelang
import tilelang.language as T
import torch

BLOCK = 1024
THREADS = 256


@tilelang.jit(out_idx=[-1])
def add_program(dtype="float32", block=BLOCK, threads=THREADS):
    n = T.dynamic("n") if hasattr(T, "dynamic") else T.symbolic("n")  # symbolic before 0.1.6

    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
            for i in T.Parallel(block):
                idx = bx * block + i
                if idx < n:
                    C[idx] = A[idx] + B[idx]

    return main


def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    if a.numel() == 0:
        return torch.empty_like(a)
    return add_program(str(a.dtype).removeprefix("torch."))(a, b)
