"""numba-cuda vector add: a @cuda.jit kernel written in Python, one thread per element.

numba-cuda compiles on the first launch for the argument types; tensors cross to numba
without a copy (`cuda.as_cuda_array`), and the launch goes on torch's current stream.
"""

import numpy as np
import torch

# numpy 2.5 removed np.row_stack, for which the numba-cuda of the H200 image (2026-11) still
# registers an overload when a launch first loads its numpy support: the alias keeps it loading.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda  # after the alias above

THREADS = 256


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    n = a.numel()
    if n == 0:
        return out
    stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
    blocks = (n + THREADS - 1) // THREADS
    add_kernel[blocks, THREADS, stream](cuda.as_cuda_array(a), cuda.as_cuda_array(b),
                                        cuda.as_cuda_array(out))
    return out
