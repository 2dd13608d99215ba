"""Device tensors between krung's processes through CUDA IPC, without a trip through host memory.

Through a socket, a 256 MB tensor takes about 0.9 s from one GPU process to another (measured
on the H200: device-to-host copy, socket, host-to-device copy); through IPC it is a
device-to-device copy. The sender copies the tensor into a buffer of its own, allocated with
cuMemAlloc for that purpose alone (never a block of torch's caching allocator, which could
share its segment with other data, such as the judge's expected outputs), and sends the
buffer's IPC handle. The receiver opens it, checks the size it was told against the
allocation's real size, copies the bytes into a tensor of its own and closes the handle. The
sender frees the buffer once the peer has answered. Uses the driver API through ctypes: no
dependency beyond torch.

The private copy protects the sender's other data from the receiver: the judge's expected
outputs from the worker. The worker has nothing to hide from the judge, so what it sends
(outputs, inputs after a call: several GiB each at declared sizes) is `Shared` in place: the
handle of the torch allocation that holds the tensor, and the tensor's offset in it, the
tensor kept alive until the judge has answered. The receiver checks offset and size against
that allocation's real extent.

At declared sizes (KernelBench's 6 GiB tensors) the buffer may not fit: torch's caching
allocator keeps what the last case freed, which cuMemAlloc cannot use, so on out of memory the
cache goes back to the driver and the allocation is tried once more; if it still does not fit,
`NoRoom` tells the channel to send that tensor through host memory instead (slower, never
failing the run for want of a copy).
"""

from __future__ import annotations

import base64
import ctypes
from typing import Any

from krung.protocol.cuda_driver import check, lib

_IPC_LAZY_ENABLE_PEER_ACCESS = 1
_CUDA_ERROR_OUT_OF_MEMORY = 2
_FALLBACK = "set KRUNG_CUDA_IPC=0 to send device tensors through host memory instead"


class NoRoom(MemoryError):
    """No device memory for the private copy, even with torch's cache handed back."""


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class _DeviceBytes:
    """Lets torch view raw device memory (no copy) through __cuda_array_interface__."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (pointer, False), "version": 2}


def _view(pointer: int, nbytes: int) -> Any:
    import torch

    return torch.as_tensor(_DeviceBytes(pointer, nbytes), device="cuda")


class Exported:
    """A private device copy of a tensor that another process can open."""

    offset = 0  # the copy is the whole allocation

    def __init__(self, tensor: Any):
        import torch

        flat = tensor.detach().reshape(-1).contiguous()
        self.nbytes = flat.numel() * flat.element_size()
        self.pointer = _allocate(self.nbytes)
        _view(self.pointer, self.nbytes).copy_(flat.view(torch.uint8))
        torch.cuda.synchronize()  # the peer reads it from another process: finish the copy
        handle = _IpcHandle()
        check(lib().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(self.pointer)),
              "cuIpcGetMemHandle", _FALLBACK)
        self.handle = base64.b64encode(bytes(handle)).decode()

    def free(self) -> None:
        if self.pointer:
            lib().cuMemFree_v2(ctypes.c_uint64(self.pointer))
            self.pointer = 0


class Shared:
    """A contiguous tensor of this process that another process can open where it lies: the
    handle of its allocation, and its offset there. For a peer allowed to read the whole
    allocation (the judge, from its worker); the tensor lives until `free`."""

    def __init__(self, tensor: Any):
        import torch

        if not tensor.is_contiguous():
            raise ValueError("only a contiguous tensor is shared in place")
        self.tensor = tensor
        self.nbytes = tensor.numel() * tensor.element_size()
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        check(lib().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                            ctypes.c_uint64(tensor.data_ptr())),
              "cuMemGetAddressRange")
        self.offset = tensor.data_ptr() - base.value
        torch.cuda.synchronize()  # the peer reads it from another process: finish its writes
        handle = _IpcHandle()
        check(lib().cuIpcGetMemHandle(ctypes.byref(handle), base), "cuIpcGetMemHandle",
              _FALLBACK)
        self.handle = base64.b64encode(bytes(handle)).decode()

    def free(self) -> None:
        self.tensor = None


def _allocate(nbytes: int) -> int:
    import torch

    pointer = ctypes.c_uint64()
    result = lib().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes))
    if result == _CUDA_ERROR_OUT_OF_MEMORY:
        torch.cuda.empty_cache()  # the caching allocator's free blocks, back to the driver
        result = lib().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes))
    if result == _CUDA_ERROR_OUT_OF_MEMORY:
        raise NoRoom(f"no device memory for a {nbytes}-byte IPC buffer")
    check(result, "cuMemAlloc", _FALLBACK)
    return pointer.value


def import_copy(handle: str, dtype: Any, shape: tuple, offset: int = 0,
                into: Any = None) -> Any:
    """A tensor of this process holding the bytes at `offset` behind a peer's IPC handle:
    `into` (a contiguous device tensor of that dtype and shape) where given, else a new one."""
    import torch

    data = base64.b64decode(handle)
    if len(data) != ctypes.sizeof(_IpcHandle):
        raise ValueError(f"an IPC handle of {len(data)} bytes")
    raw = _IpcHandle.from_buffer_copy(data)
    pointer = ctypes.c_uint64()
    check(lib().cuIpcOpenMemHandle_v2(ctypes.byref(pointer), raw,
                                      ctypes.c_uint(_IPC_LAZY_ENABLE_PEER_ACCESS)),
          "cuIpcOpenMemHandle", _FALLBACK)
    try:
        if into is not None and not (into.is_cuda and into.is_contiguous() and into.dtype == dtype
                                     and tuple(into.shape) == tuple(shape)):
            raise ValueError(f"no {shape} {dtype} contiguous device tensor to copy into")
        out = torch.empty(shape, dtype=dtype, device="cuda") if into is None else into
        nbytes = out.numel() * out.element_size()  # what the spec implies, not what was said
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        check(lib().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer),
              "cuMemGetAddressRange")
        start = pointer.value + offset
        if offset < 0 or start + nbytes > base.value + size.value:
            raise ValueError(f"an IPC buffer of {size.value} bytes for a {shape} {dtype} tensor "
                             f"at offset {offset}")
        if nbytes:
            out.reshape(-1).view(torch.uint8).copy_(_view(start, nbytes))
        torch.cuda.synchronize()
    finally:
        lib().cuIpcCloseMemHandle(pointer)
    return out
