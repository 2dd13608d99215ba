"""The CUDA driver API through ctypes, for the few calls torch does not expose.

Used for IPC buffers (cuda_ipc.py) and for poisoning free memory (guard.py). No dependency
beyond torch, which loads the driver anyway.
"""

from __future__ import annotations

import ctypes
from typing import Any

_driver: Any = None


def lib() -> Any:
    """libcuda, with torch's primary context created and current on this thread."""
    global _driver
    if _driver is None:
        import torch

        torch.empty(1, device="cuda")
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def check(result: int, what: str, hint: str = "") -> None:
    if result != 0:
        name = ctypes.c_char_p()
        lib().cuGetErrorName(result, ctypes.byref(name))
        label = name.value.decode() if name.value else str(result)
        raise RuntimeError(f"{what} failed with {label}{'; ' + hint if hint else ''}")


def memset(pointer: int, value: int, nbytes: int, stream: int) -> None:
    """Fill device memory with one byte value, in stream order."""
    check(lib().cuMemsetD8Async(ctypes.c_uint64(pointer), ctypes.c_ubyte(value),
                                ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)),
          "cuMemsetD8Async")
