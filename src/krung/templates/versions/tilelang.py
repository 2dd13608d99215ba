"""{{title}}, version 1, in TileLang.

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs, CUDA tensors. `silu_program(n, dtype)`
builds a TileLang program (a T.prim_func); @tilelang.jit compiles it on first use for each
distinct (n, dtype) and caches it (for one build across sizes, make n symbolic with
T.dynamic). `out_idx=[-1]` makes the last tensor the output, allocated by TileLang and
returned. It needs an NVIDIA GPU and tilelang; without them the compile rung fails and says so.
{{state}}
{{checks}}
"""

import tilelang
import tilelang.language as T
import torch

BLOCK = 1024
THREADS = 256


@tilelang.jit(out_idx=[-1])
def silu_program(n, dtype, block=BLOCK, threads=THREADS):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        # One block of `threads` threads per BLOCK elements; T.Parallel spreads the loop over
        # the threads, and the guard covers the ragged end. Math in float32.
        with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
            for i in T.Parallel(block):
                idx = bx * block + i
                if idx < n:
                    v = T.cast(X[idx], "float32")
                    Y[idx] = T.cast(v / (1.0 + T.exp(-v)), dtype)

    return main


def silu(x):
    if not torch.cuda.is_available():
        raise RuntimeError("this TileLang version needs an NVIDIA GPU, and torch sees none "
                           "here: run it on a GPU machine")
    x = x.contiguous()
    if x.numel() == 0:
        return torch.empty_like(x)
    program = silu_program(x.numel(), str(x.dtype).removeprefix("torch."))
    return program(x.reshape(-1)).reshape(x.shape)


# {{entry}}
