"""{{title}}, version 1, in CUDA C++ built with torch.utils.cpp_extension.load_inline.

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs, CUDA tensors. The first call compiles
CUDA_SOURCE with nvcc (krung builds it in a cache by its store, keyed by the source and flags,
so an unchanged source is built once) and launches it. Running it needs an NVIDIA GPU, nvcc,
ninja and a CUDA build of torch; on a machine without a GPU, krung's compile rung compiles
CUDA_SOURCE for sm_90a with nvcc (errors at the line of this file), and does not run it.
{{state}}
{{checks}}
"""

import functools
import hashlib

import torch
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>

// One thread per element, math in float32, for float32, float16 and bfloat16 tensors.
template <typename scalar_t>
__global__ void silu_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y,
                            int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = static_cast<float>(x[i]);
        y[i] = static_cast<scalar_t>(v / (1.0f + __expf(-v)));
    }
}

torch::Tensor silu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "silu: x must be a CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return y;
    const int threads = 256;
    const auto blocks = static_cast<unsigned int>((n + threads - 1) / threads);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16,
                                    xc.scalar_type(), "silu", [&] {
        // torch's default stream, the one krung calls on (only torch's CPU-independent
        // headers here, so krung can compile this for sm_90a on a machine without a GPU)
        silu_kernel<scalar_t><<<blocks, threads>>>(xc.data_ptr<scalar_t>(),
                                                   y.data_ptr<scalar_t>(), n);
    });
    const cudaError_t launched = cudaGetLastError();
    TORCH_CHECK(launched == cudaSuccess, "silu: ", cudaGetErrorString(launched));
    return y;
}
"""
CPP_SOURCE = "torch::Tensor silu(torch::Tensor x);"  # what the Python binding exposes


@functools.cache
def _module():
    if not torch.cuda.is_available():
        raise RuntimeError("this CUDA C++ version needs an NVIDIA GPU and a CUDA build of torch, "
                           "and torch sees no GPU here: run it on a GPU machine")
    # A name per source: each version gets its own build, and none waits on another's lock.
    name = "krung_" + hashlib.sha256((CPP_SOURCE + CUDA_SOURCE).encode()).hexdigest()[:16]
    return load_inline(name=name, cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                       functions=["silu"], extra_cuda_cflags=["-O3"])


def silu(x):
    return _module().silu(x)


# {{entry}}
