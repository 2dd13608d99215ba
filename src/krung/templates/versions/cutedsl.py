"""{{title}}, version 1, in CuTeDSL (CUTLASS's Python DSL, pip package nvidia-cutlass-dsl).

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs, CUDA tensors. A @cute.kernel function is the
GPU code; a @cute.jit function launches it; `cute.compile` compiles that for the inputs' dtype
on first use (cached here, one compile per dtype: the layouts are marked dynamic, so sizes do
not recompile). It needs an NVIDIA GPU and nvidia-cutlass-dsl; without them the compile rung
fails and says so.
{{state}}
{{checks}}
"""

import functools

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def silu_kernel(gX: cute.Tensor, gY: cute.Tensor, n: cutlass.Int32):
    # One thread per element of the flattened tensors, math in float32.
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    if i < n:
        v = cutlass.Float32(gX[i])  # a numeric type converts the value it is called on
        gY[i] = gY.element_type(v / (1.0 + cute.math.exp(-v)))


@cute.jit
def silu_launch(mX: cute.Tensor, mY: cute.Tensor, n: cutlass.Int32):
    blocks = (n + THREADS - 1) // THREADS
    silu_kernel(mX, mY, n).launch(grid=(blocks, 1, 1), block=(THREADS, 1, 1))


@functools.cache
def _compiled(dtype: torch.dtype):
    x = torch.ones(THREADS, dtype=dtype, device="cuda")  # any size: the layout is dynamic
    return cute.compile(silu_launch, _view(x), _view(torch.empty_like(x)), x.numel())


def _view(t: torch.Tensor) -> cute.Tensor:
    return from_dlpack(t.reshape(-1)).mark_layout_dynamic()


def silu(x):
    if not torch.cuda.is_available():
        raise RuntimeError("this CuTeDSL version needs an NVIDIA GPU, and torch sees none "
                           "here: run it on a GPU machine")
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _compiled(x.dtype)(_view(x), _view(y), x.numel())
    return y


# {{entry}}
