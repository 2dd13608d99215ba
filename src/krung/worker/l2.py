"""The persisting L2 lines, kept out of the timed calls.

Since Ampere a stream's access-policy window (cudaStreamSetAttribute with a
cudaAccessPolicyWindow, hitProp cudaAccessPropertyPersisting) marks the lines a kernel
touches as persisting, and those lines live in a set-aside part of the L2 that the context's
limit sizes (cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, bytes); 0, the default, sets
nothing aside). Lines in that part survive krung's flush, which writes twice the L2 with
normal accesses: a version that raised the limit and pinned its inputs would be timed reading
them from the L2 on every call. Persisting lines within one call are a fair optimisation;
across calls they are not.

So the worker sets the limit to 0 when it starts (`start`), and the flush before every timed
call (`Flush.zero_`) reads the limit back: once a version has raised it, every flush first
resets the persisting lines to normal ones (cuCtxResetPersistingL2Cache), which the flush then
evicts. The reset is not stream-ordered, so the device is synchronised before it: such a
version's calls are no longer queued back to back (CUPTI's device times are unaffected; the
events fallback then includes the launch). The version is timed as if nothing persisted
between its calls, and the benchmark says the limit it set (`persisting_l2_bytes`); it is not
rejected, since persisting lines within one call are its own business. A version that leaves
the limit at 0 pays one cuCtxGetLimit per call. Driver API through ctypes, as torch loads it.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


def _driver() -> Any:
    from krung.protocol.cuda_driver import lib

    return lib()


def limit() -> int | None:
    """The context's persisting-L2 limit in bytes; None where the driver does not say."""
    value = ctypes.c_size_t()
    try:
        status = _driver().cuCtxGetLimit(ctypes.byref(value),
                                         ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE))
    except (OSError, AttributeError):  # no libcuda, or a driver without the call
        return None
    return int(value.value) if status == 0 else None


def start() -> None:
    """Set nothing aside for persisting lines (the driver's default, made sure of), so a
    limit found later is the version's."""
    with contextlib.suppress(OSError, AttributeError):  # no libcuda, or an older driver
        _driver().cuCtxSetLimit(ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE),
                                ctypes.c_size_t(0))


def reset() -> bool:
    """Demote every persisting line to a normal one; whether the driver did."""
    try:
        return _driver().cuCtxResetPersistingL2Cache() == 0
    except (OSError, AttributeError):
        return False


class Flush:
    """The L2 flush before a timed call: persisting lines reset where a limit was ever
    raised, then the buffer written (twice the L2's size). Stands where timing.py keeps its
    flush buffer: `zero_()` flushes, `numel()` is the buffer's."""

    def __init__(self, buffer: Any):
        self.buffer = buffer
        self.persisting_l2_bytes = 0  # the largest limit seen before a timed call
        self.resets = 0

    def zero_(self) -> None:
        found = limit() or 0
        self.persisting_l2_bytes = max(self.persisting_l2_bytes, found)
        if self.persisting_l2_bytes:
            import torch

            # The reset acts when called, not in stream order: the calls queued before it
            # must have run, or the last one could mark lines after it.
            torch.cuda.synchronize()
            if reset():
                self.resets += 1
        self.buffer.zero_()

    def numel(self) -> int:
        return int(self.buffer.numel())
