"""The GPU's pipes outside the tensor cores, each measured by a small CUDA kernel.

A kernel that has no tensor-core instruction cannot reach a matmul's peak: its compute
ceiling is that of the pipes its instructions issue to (krung.judge.rungs.roofline.pipes
chooses them from its SASS). Each pipe is measured here by one kernel that keeps it busy:
every thread runs CHAINS independent chains of one instruction, UNROLL steps in each of
`iters` loop turns, with enough threads for every SM, so the pipe's throughput binds and
not its latency. The instructions are written as inline PTX, so the compiler cannot fold a
chain into fewer steps, and with the operands from the kernel's arguments, so it cannot
fold them into constants:

- fma: `fma.rn.f32` (SASS FFMA), 2 FLOP each;
- hfma2: `fma.rn.f16x2` (HFMA2: two fp16 FMAs), 4 FLOP each;
- mufu: `ex2.approx.ftz.f32` (MUFU.EX2, the special function unit), 1 operation each;
- int: `mad.lo.u32` (IMAD), 2 operations each;
- smem: `ld.volatile.shared.v4.u32` (LDS.128, volatile so that ptxas keeps every load) over a 32 KiB buffer, 16 bytes a thread each.

The kernels are compiled with NVRTC through torch (`torch.cuda._compile_kernel`) for the
GPU's own architecture, and timed like every ceiling (krung.worker.timing.measure: CUPTI
device time, the median). `tests/test_pipe_kernels.py` compiles the same source with nvcc
where there is one and checks the SASS holds the instruction each kernel is meant to time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CHAINS = 8
UNROLL = 16
THREADS = 256
ITERS = 1024
SMEM_WORDS = 8192  # 32 KiB of 32-bit words per block
SMEM_STEPS = SMEM_WORDS * 4 // (THREADS * 16)  # loads per turn that cover the buffer once

_PRELUDE = f"""
#define CHAINS {CHAINS}
#define UNROLL {UNROLL}
#define SMEM_WORDS {SMEM_WORDS}
#define SMEM_STEPS {SMEM_STEPS}
"""

SOURCE = _PRELUDE + r"""
// Each kernel: CHAINS independent chains per thread, UNROLL steps per loop turn, and the
// chains' result written out so that none of the work can be dropped.
#define CHAIN_LOOP(STEP)                                                  \
    for (int i = 0; i < iters; ++i) {                                     \
        _Pragma("unroll") for (int k = 0; k < UNROLL; ++k) {              \
            _Pragma("unroll") for (int c = 0; c < CHAINS; ++c) { STEP; }  \
        }                                                                 \
    }

extern "C" __global__ void krung_pipe_fma(float* out, int iters, int a_bits, int b_bits) {
    float a, b, x[CHAINS];
    asm("mov.b32 %0, %1;" : "=f"(a) : "r"(a_bits));
    asm("mov.b32 %0, %1;" : "=f"(b) : "r"(b_bits));
    for (int c = 0; c < CHAINS; ++c) x[c] = 1e-3f * threadIdx.x + c;
    CHAIN_LOOP(asm("fma.rn.f32 %0, %0, %1, %2;" : "+f"(x[c]) : "f"(a), "f"(b)))
    float sum = 0.0f;
    for (int c = 0; c < CHAINS; ++c) sum += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

extern "C" __global__ void krung_pipe_hfma2(unsigned* out, int iters, int a_bits, int b_bits) {
    unsigned a = a_bits, b = b_bits, x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = 0x3c003c00u + threadIdx.x + c;  // about 1.0
    CHAIN_LOOP(asm("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(x[c]) : "r"(a), "r"(b)))
    unsigned all = 0;
    for (int c = 0; c < CHAINS; ++c) all ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = all;
}

extern "C" __global__ void krung_pipe_mufu(float* out, int iters, int a_bits, int b_bits) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = 1e-4f * threadIdx.x + 0.1f * c;
    // x <- 2^-x stays within (0.5, 1]: no overflow, no denormals
    CHAIN_LOOP(asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(x[c]) : "f"(-x[c])))
    float sum = 0.0f;
    for (int c = 0; c < CHAINS; ++c) sum += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

extern "C" __global__ void krung_pipe_int(unsigned* out, int iters, int a_bits, int b_bits) {
    unsigned a = a_bits, b = b_bits, x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = threadIdx.x * 2654435761u + c;
    CHAIN_LOOP(asm("mad.lo.u32 %0, %0, %1, %2;" : "+r"(x[c]) : "r"(a), "r"(b)))
    unsigned all = 0;
    for (int c = 0; c < CHAINS; ++c) all ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = all;
}

extern "C" __global__ void krung_pipe_smem(unsigned* out, int iters, int a_bits, int b_bits) {
    __shared__ alignas(16) unsigned buf[SMEM_WORDS];
    for (int i = threadIdx.x; i < SMEM_WORDS; i += blockDim.x) buf[i] = (unsigned)i * (unsigned)a_bits + (unsigned)b_bits;
    __syncthreads();
    unsigned base;  // this thread's first 16 bytes, as a shared-window address
    asm("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }"
        : "=r"(base) : "l"(buf + 4 * threadIdx.x));
    unsigned all = 0;
    for (int i = 0; i < iters; ++i) {
        _Pragma("unroll") for (int k = 0; k < SMEM_STEPS; ++k) {
            unsigned p, q, r, s;
            asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(p), "=r"(q), "=r"(r), "=r"(s)
                         : "r"(base + k * 16 * blockDim.x));
            all ^= p ^ q ^ r ^ s;
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = all;
}
"""


@dataclass(frozen=True)
class Pipe:
    """One pipe's kernel and what one thread's loop turn counts."""

    name: str
    kernel: str
    per_turn: float  # FLOP, operations or bytes one thread does per loop turn
    blocks_per_sm: int
    a_bits: int  # the chain's operands, as 32-bit patterns
    b_bits: int


_F32_NEAR_ONE = 0x3F7FBE77  # 0.999
_F32_SMALL = 0x3A83126F  # 0.001
_F16X2_NEAR_ONE = 0x3BFF3BFF  # two halves of 0.9995
_F16X2_SMALL = 0x14001400  # two halves of 0.00098

PIPE_KERNELS = (
    Pipe("fma", "krung_pipe_fma", 2 * CHAINS * UNROLL, 8, _F32_NEAR_ONE, _F32_SMALL),
    Pipe("hfma2", "krung_pipe_hfma2", 4 * CHAINS * UNROLL, 8, _F16X2_NEAR_ONE, _F16X2_SMALL),
    Pipe("mufu", "krung_pipe_mufu", CHAINS * UNROLL, 8, 0, 0),
    Pipe("int", "krung_pipe_int", 2 * CHAINS * UNROLL, 8, 1664525, 1013904223),
    Pipe("smem", "krung_pipe_smem", 16 * SMEM_STEPS, 6, 2654435761 - 2**32, 12345),
)
# What each measurement says it measured (the calibration's method, and its table).
WHAT = {
    "fma": "FP32 FMA pipe: FFMA chains, no tensor cores (FLOP/s)",
    "hfma2": "FP16 non-tensor pipe: HFMA2 chains (FLOP/s)",
    "mufu": "special function unit: MUFU.EX2 chains (operations/s)",
    "int": "INT32 pipe: IMAD chains (operations/s, 2 per IMAD)",
    "smem": "shared memory: LDS.128 reads (bytes/s)",
}


def measure_pipes(sms: int, time_us: Callable[[Callable[[], Any]], float],
                  unsupported: dict[str, str]) -> dict[str, float]:
    """The rate of every pipe this GPU lets krung measure; a pipe that cannot be measured
    is left out with the reason in `unsupported` (its datasheet figure stands in)."""
    import torch

    try:
        compile_kernel = torch.cuda._compile_kernel
        kernels = {pipe.name: compile_kernel(SOURCE, pipe.kernel) for pipe in PIPE_KERNELS}
    except Exception as exc:  # no NVRTC in this torch, or it failed: the datasheet stands in
        reason = f"not measured: NVRTC through torch failed ({type(exc).__name__}: " \
                 f"{str(exc).splitlines()[0] if str(exc) else ''})"[:300]
        for pipe in PIPE_KERNELS:
            unsupported[pipe.name] = reason
        return {}
    rates = {}
    for pipe in PIPE_KERNELS:
        blocks = pipe.blocks_per_sm * sms
        out = torch.empty(blocks * THREADS, dtype=torch.int32, device="cuda")
        kernel = kernels[pipe.name]

        def call(kernel: Any = kernel, out: Any = out, pipe: Pipe = pipe,
                 blocks: int = blocks) -> None:
            kernel(grid=(blocks, 1, 1), block=(THREADS, 1, 1),
                   args=[out, ITERS, pipe.a_bits, pipe.b_bits])

        try:
            call()  # load the module and catch a launch error before the timing
            torch.cuda.synchronize()
            seconds = time_us(call) * 1e-6
        except RuntimeError as exc:
            unsupported[pipe.name] = f"not measured: {str(exc).splitlines()[0]}"[:300]
            continue
        rates[pipe.name] = blocks * THREADS * ITERS * pipe.per_turn / seconds
    return rates
