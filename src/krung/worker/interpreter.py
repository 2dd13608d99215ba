"""Make Triton's interpreter trustworthy for the CPU runs krung does.

Triton's interpreter (TRITON_INTERPRET=1) keeps bfloat16 values as raw uint16 bits in numpy,
so any arithmetic on them (``a * b``, ``tl.dot``, ``tl.sum``) is integer arithmetic on bit
patterns: a 200x300x129 bf16 product comes out wrong by ~1e11 under Triton 3.6 and 3.9.
Its float32 -> bfloat16 cast also truncates, where the GPU (and Triton's default
`fp_downcast_rounding`) rounds to nearest even.

The sound fix is to give the interpreter a real bfloat16 numpy type (``ml_dtypes.bfloat16``,
the one JAX uses): loads and stores move the same bits, arithmetic is done in float32 and
rounded to bfloat16, casts round to nearest even, as the GPU does, and ``tl.dot`` accumulates
in float32. No tolerance is loosened; the kernel runs as written.
"""

from __future__ import annotations

import functools

_PATCHED = False


def fix_bfloat16() -> None:
    """Patch the interpreter once, in the process that runs the kernels."""
    global _PATCHED
    if _PATCHED:
        return
    import ml_dtypes
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._get_np_dtype
    bfloat16 = np.dtype(ml_dtypes.bfloat16)

    @functools.wraps(original)
    def get_np_dtype(tt_dtype):  # type: ignore[no-untyped-def]
        element = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if element == tl.bfloat16:
            return bfloat16
        return original(tt_dtype)

    original_cast = interpreter.InterpreterBuilder.cast_impl

    @functools.wraps(original_cast)
    def cast_impl(self, src, dst_type):  # type: ignore[no-untyped-def]
        if tl.bfloat16 in (src.dtype.scalar, dst_type.scalar):  # numpy casts round to nearest
            data = src.data.astype(get_np_dtype(dst_type))
            return interpreter.TensorHandle(data, dst_type.scalar)
        return original_cast(self, src, dst_type)

    interpreter._get_np_dtype = get_np_dtype
    interpreter.InterpreterBuilder.cast_impl = cast_impl
    _PATCHED = True


def fix_autotune() -> None:
    """Let @triton.autotune choose a config under the interpreter.

    Triton 3.6's autotuner times configs with the active GPU driver's benchmarker, and on a
    machine without a GPU there is none ("0 active drivers"), so any autotuned kernel fails
    on its first call. Under the interpreter it gets a wall-clock benchmarker instead: each
    config runs (so a config that breaks still shows) and the fastest interpreted one is
    chosen. That choice says nothing about GPU speed; krung records it as any other."""
    from triton.runtime import autotuner

    if getattr(autotuner.Autotuner, "krung_cpu_bench", False):
        return

    def do_bench(self):  # type: ignore[no-untyped-def]
        return self._do_bench if self._do_bench is not None else wall_clock_bench

    autotuner.Autotuner.do_bench = property(do_bench)
    autotuner.Autotuner.krung_cpu_bench = True


def wall_clock_bench(kernel_call, quantiles=None, reps: int = 2):  # type: ignore[no-untyped-def]
    """Triton's benchmarker interface on a CPU: milliseconds per call of `kernel_call`."""
    import statistics
    import time

    kernel_call()  # warm
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        kernel_call()
        times.append((time.perf_counter() - start) * 1e3)
    middle = statistics.median(times)
    return [middle, min(times), max(times)][:len(quantiles)] if quantiles else middle
