"""The worker's defences against versions that game the checks.

All of it runs in the candidate's own process, so a determined version could undo any of it;
what it buys is that the easy tricks fail loudly, and the judge (which never runs the
version) still compares every output itself.

- `Sentinels`: the timer, clock and synchronisation functions as they were before the version
  was imported; a version that replaces one is caught.
- `poison`: before a call, memory the version's next allocations will reuse is filled with a
  byte pattern (0xFF makes NaN in every float type), so an output that is not fully written
  shows garbage instead of stale or zeroed values; on a CPU, `perturbed` has glibc fill every
  block it hands out during the call too (a large one comes fresh, zeroed, from the OS).
- `OpTrace`: the torch operators a call actually ran (TorchDispatchMode), to enforce a
  problem's ban on delegating its core operation, whatever names or tricks the source used.
- `python_threads`: threads the version started and left running.

Stdlib and torch only: this module is imported by the worker.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

NAN_BYTE = 0xFF  # all-ones: NaN in float16/bfloat16/float32/float64, -1 in integers
OTHER_BYTE = 0x7F  # a second pattern, for the determinism rung's second call
M_PERTURB = -6  # glibc's mallopt parameter: fill each allocation with the byte ^ 0xFF


class Sentinels:
    """Identities of the functions timing relies on, taken before any version is imported."""

    def __init__(self) -> None:
        self.bound = dict(self._current())

    @staticmethod
    def _current() -> list[tuple[str, Any]]:
        import torch

        found: list[tuple[str, Any]] = [
            ("time.perf_counter", time.perf_counter),
            ("time.perf_counter_ns", time.perf_counter_ns),
            ("time.time", time.time),
            ("torch.cuda.synchronize", torch.cuda.synchronize),
            ("torch.cuda.Event", torch.cuda.Event),
            ("torch.cuda.Event.record", torch.cuda.Event.record),
            ("torch.cuda.Event.elapsed_time", torch.cuda.Event.elapsed_time),
            ("torch.cuda.Event.synchronize", torch.cuda.Event.synchronize),
            ("torch.cuda._sleep", torch.cuda._sleep),
            ("torch.Tensor.clone", torch.Tensor.clone),
            ("torch.equal", torch.equal),
            ("torch.allclose", torch.allclose),
        ]
        try:
            import torch.profiler

            found.append(("torch.profiler.profile", torch.profiler.profile))
        except ImportError:  # a torch without the profiler: nothing to guard
            pass
        return found

    def tampered(self) -> list[str]:
        return [name for name, fn in self._current() if self.bound.get(name) is not fn]


def python_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def poison(specs: list[dict[str, Any]], byte: int, device: str) -> None:
    """Fill the memory the next allocations of these shapes will most likely get with `byte`.

    Blocks the size of each expected output are allocated, filled and freed, so the allocator
    hands them out next; on a GPU every free block torch's caching allocator holds is filled
    too. (On a CPU, the call also runs `perturbed`.)
    """
    import torch

    held = []
    for spec in specs:
        dtype = getattr(torch, spec["dtype"])
        count = 1
        for size in spec["shape"]:
            count *= int(size)
        block = torch.empty(count * dtype.itemsize, dtype=torch.uint8, device=device)
        block.fill_(byte)
        held.append(block)
    del held
    if device.startswith("cuda"):
        _poison_cached_gpu_blocks(byte)


@contextlib.contextmanager
def perturbed(byte: int) -> Iterator[None]:
    """Inside the block, glibc fills every block malloc hands out with `byte` (0xFE for 0xFF,
    which its perturbation cannot make: -1.7e38 or NaN in every float type). For the
    version's call alone: process-wide it would memset the channel's receive buffers as well,
    at a cost that grows with the square of a message's size. Nothing where the C library
    is not glibc."""
    mallopt = _glibc_mallopt()
    if mallopt is None:
        yield
        return
    mallopt(M_PERTURB, (0xFE if byte == 0xFF else byte) ^ 0xFF)
    try:
        yield
    finally:
        mallopt(M_PERTURB, 0)


def _glibc_mallopt() -> Any:
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError):  # not glibc
        return None
    import ctypes

    return ctypes.CDLL(None).mallopt


def _poison_cached_gpu_blocks(byte: int) -> None:
    import torch

    from krung.protocol.cuda_driver import memset

    stream = torch.cuda.current_stream().cuda_stream
    for segment in torch.cuda.memory_snapshot():
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "inactive":
                memset(block.get("address", address), byte, block["size"], stream)
            address += block["size"]
    torch.cuda.current_stream().synchronize()


class OpTrace:
    """Records the torch operators run inside the `with` block."""

    def __init__(self) -> None:
        self.ops: set[str] = set()

    def __enter__(self) -> OpTrace:
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops

        class _Recorder(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                ops.add(str(func.overloadpacket.__name__))
                return func(*args, **(kwargs or {}))

        self._mode = _Recorder()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
