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

The interpreter's memory operations are C++ (``triton._C.libtriton.interpreter``) and know
numpy's own types only: Triton 3.6 moves any 2-byte type, Triton 3.9 raises ``std::bad_cast``
on every bfloat16 load and store, and neither has bfloat16 atomics. krung hands them the
bfloat16 bits as uint16 (the same bytes) and does bfloat16 atomics itself, one element at a
time as the hardware does (the interpreter runs one program at a time).
"""

from __future__ import annotations

import functools

_PATCHED = False


def fix_interpreter() -> None:
    """Every fix krung makes to Triton's interpreter, in the process that runs the kernels:
    bfloat16, the autotuner, libdevice (krung.worker.libdevice)."""
    from krung.worker.libdevice import fix_libdevice

    fix_bfloat16()
    fix_autotune()
    fix_libdevice()


def fix_bfloat16() -> None:
    """Patch the interpreter once, in the process that runs the kernels (with the numpy fix
    below: both are about how the interpreter holds numbers in numpy)."""
    global _PATCHED
    if _PATCHED:
        return
    fix_scalar_index()
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
    interpreter._interpreter = Bfloat16Memory(interpreter._interpreter, bfloat16)
    _PATCHED = True


def fix_scalar_index() -> None:
    """A scalar used as an index (``range(tl.cdiv(K, BK))``) under numpy 2.4 and newer.

    The interpreter holds a scalar as a 1-element array; Triton 3.6 takes ``int()`` of it,
    which numpy 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars").
    Triton 3.9 squeezes it first; krung does the same for every Triton, so no numpy cap is
    needed."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    @functools.wraps(original)
    def patch_lang_tensor(tensor, scope):  # type: ignore[no-untyped-def]
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interpreter._patch_lang_tensor = patch_lang_tensor


class Bfloat16Memory:
    """The interpreter's C++ memory operations, with bfloat16 arrays moved as their uint16 bits.

    Stands in for the module ``triton.runtime.interpreter`` imports as ``_interpreter``; every
    other name (fma_fp32, RMW_OP, ...) is the module's own."""

    def __init__(self, native, bfloat16):  # type: ignore[no-untyped-def]
        self.native = native
        self.bfloat16 = bfloat16

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.native, name)

    def load(self, ptrs, mask, other, dtype):  # type: ignore[no-untyped-def]
        if dtype != self.bfloat16:
            return self.native.load(ptrs, mask, other, dtype)
        import numpy as np

        bits = self.native.load(ptrs, mask, other.view(np.uint16), np.dtype(np.uint16))
        return bits.view(self.bfloat16)

    def store(self, ptrs, value, mask):  # type: ignore[no-untyped-def]
        if value.dtype == self.bfloat16:
            value = value.view("uint16")
        return self.native.store(ptrs, value, mask)

    def atomic_cas(self, ptrs, expected, value, sem):  # type: ignore[no-untyped-def]
        if value.dtype != self.bfloat16:
            return self.native.atomic_cas(ptrs, expected, value, sem)
        old = self.native.atomic_cas(ptrs, expected.view("uint16"), value.view("uint16"), sem)
        return old.view(self.bfloat16)

    def atomic_rmw(self, op, ptrs, value, mask, sem):  # type: ignore[no-untyped-def]
        """Read, combine in float32, round to bfloat16, write: element by element, so lanes
        that hit one address all count, as on the GPU. Returns the values read."""
        if value.dtype != self.bfloat16:
            return self.native.atomic_rmw(op, ptrs, value, mask, sem)
        import numpy as np

        # Triton allows only these two on bfloat16 (tl.atomic_max and the rest refuse it).
        combine = {self.native.RMW_OP.FADD: np.add,
                   self.native.RMW_OP.XCHG: lambda old, new: new}[op]
        ptrs, value, mask = np.broadcast_arrays(ptrs, value, mask)
        old = np.zeros(ptrs.shape, dtype=self.bfloat16)
        one = np.ones(1, dtype=bool)
        for index in map(tuple, np.argwhere(mask)):
            address = ptrs[index].reshape(1)
            old[index] = self.load(address, one, np.zeros(1, self.bfloat16), self.bfloat16)[0]
            new = combine(old[index].astype(np.float32), value[index].astype(np.float32))
            self.store(address, np.asarray([new]).astype(self.bfloat16), one)
        return old


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
