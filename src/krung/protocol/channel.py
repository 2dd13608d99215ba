"""The private channel between krung's processes: JSON headers plus raw tensor bytes.

Nothing that crosses it is unpickled: a candidate could craft a pickle that runs code in
the judge. A message is one JSON frame, with every tensor replaced by a small spec, followed
by one raw frame per tensor. The channel is a socketpair created by the parent, whose child
end is handed to the child process by file descriptor, so it is never the child's stdout.

Structures arrive as they were sent: tuples stay tuples (a GPU MODE data object is often
one), dicts keep keys that are not strings, and a tensor whose strides describe a dense layout other than row-major (a transposed,
column-major input) arrives with those strides, because kernels that read raw memory depend
on them.

Messages (krung.protocol.messages) are encoded on `send` and, given what to `expect`,
decoded and checked on `recv`; whatever is malformed, down to a tensor's description,
raises messages.ProtocolError (a ValueError): the worker's side can write anything.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing import BufferTooShort
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from krung.protocol import messages
from krung.protocol.tree import json_safe, leaves

TENSOR_KEY = "__tensor__"
TUPLE_KEY = "__tuple__"
ITEMS_KEY = "__items__"  # a dict whose keys are not all strings, as [key, value] pairs
MAX_FRAME_BYTES = 1 << 36  # 64 GiB: larger than any output krung accepts
COPIED = b'"copied"'  # a frame no message can be (a message is a JSON object): IPC copies made


class ChannelClosed(Exception):
    """The other end is gone (its process exited or was killed)."""


class TooLarge(ValueError):
    """A message announced more tensor bytes than the receiver accepts; nothing was read."""


class Channel:
    """With `cuda_ipc`, CUDA tensors travel as IPC handles (krung.protocol.cuda_ipc) instead of
    bytes: as private copies, or, with `share_in_place` (a worker's channel to its judge), where
    they lie."""

    def __init__(self, connection: Connection, cuda_ipc: bool = False):
        self._conn = connection
        self.cuda_ipc = cuda_ipc
        self.share_in_place = False
        # Say `COPIED` once the tensors a message brought by IPC are copied (a worker's
        # channel): the judge frees its private copies then, not when the reply comes, so a
        # benchmark's input sets are not held twice while they are timed.
        self.acknowledge = False
        self._exported: list[Any] = []  # our IPC buffers, freed once the peer has copied them
        self._pending: bytes | None = None  # a header `poll` read past an acknowledgement

    @classmethod
    def from_fd(cls, fd: int, cuda_ipc: bool = False) -> Channel:
        return cls(Connection(fd), cuda_ipc)

    def fileno(self) -> int:
        return self._conn.fileno()

    def send(self, header: messages.Message | dict[str, Any]) -> None:
        if isinstance(header, messages.Message):
            header = messages.encode(header)
        tensors: list[Any] = []
        body = _replace_tensors(header, tensors)
        specs: list[dict[str, Any]] = []
        _collect_specs(body, specs)
        frames = []
        if self.cuda_ipc and sum(t.nbytes for t in tensors if t.is_cuda) >= RELEASE_BYTES:
            _release_cache()  # the peer allocates its copies where our cache would sit
        for spec in sorted(specs, key=_index):
            tensor = tensors[_index(spec)]
            exported = self._export(tensor)
            if exported is not None:
                self._exported.append(exported)
                spec["ipc"] = {"handle": exported.handle, "nbytes": exported.nbytes,
                               "offset": exported.offset}
            else:
                frames.append(tensor)
        body["__frames__"] = len(frames)
        try:
            self._conn.send_bytes(json.dumps(json_safe(body), allow_nan=False).encode())
            for tensor in frames:
                self._conn.send_bytes(_tensor_bytes(tensor))
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise ChannelClosed(str(exc)) from exc

    def _export(self, tensor: Any) -> Any:
        """The tensor's IPC buffer, or None where it goes through host memory (no IPC asked,
        not on a GPU, or no room on the GPU for a private copy). Shared in place where asked
        and possible (a contiguous tensor in memory cuIpcGetMemHandle can export: not
        torch's expandable segments), else a private copy."""
        if not (self.cuda_ipc and tensor.is_cuda and tensor.numel() > 0):
            return None
        from krung.protocol.cuda_ipc import Exported, NoRoom, Shared

        if self.share_in_place:
            try:
                return Shared(tensor)
            except (ValueError, RuntimeError):  # not contiguous, or not exportable
                pass
        try:
            return Exported(tensor)
        except NoRoom:
            return None

    def poll(self, timeout: float | None) -> bool:
        """Whether a message (or the end of the stream) is there within `timeout` seconds;
        the peer's acknowledgements on the way free our IPC buffers and are not messages."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._pending is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._conn.poll(left):
                return False
            try:
                frame = self._conn.recv_bytes(MAX_FRAME_BYTES)
            except (EOFError, OSError):
                return True  # the end: `recv` says so
            if frame == COPIED:
                self._free_exported()
            else:
                self._pending = frame
        return True

    def recv(self, max_tensor_bytes: int | None = None,
             expect: messages.TaggedUnion | messages.Replies | None = None,
             into: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Any:
        """The next message; tensors come back as CPU tensors, or CUDA ones when they came by
        IPC. With `max_tensor_bytes`, a message whose tensors add up to more is refused before
        any of them is allocated (the channel is then unusable). With `expect`, the message
        it decodes (ProtocolError if it is none of them), else the data as sent. `into`,
        given the message's header before any of its tensors is allocated, maps a field of
        it to tensors of ours its tensors are received into, where each has its tensor's
        dtype, shape and layout: the message then holds ours, with its values (new values
        for data held, without a second copy of it beside)."""
        data = self._recv(max_tensor_bytes, into)
        return data if expect is None else expect.decode(data)

    def _recv(self, max_tensor_bytes: int | None,
              into: Callable[[dict[str, Any]], dict[str, Any]] | None) -> dict[str, Any]:
        try:
            frame, self._pending = self._pending, None
            if frame is None:
                frame = self._conn.recv_bytes(MAX_FRAME_BYTES)
            while frame == COPIED:  # the peer copied what we sent by IPC
                self._free_exported()
                frame = self._conn.recv_bytes(MAX_FRAME_BYTES)
            header = json.loads(frame)
            self._free_exported()  # the peer answered: it has copied what we sent
            if not isinstance(header, dict):
                raise messages.ProtocolError(f"a message is a JSON object, not "
                                             f"{type(header).__name__}")
            count = header.pop("__frames__", 0)
            specs: list[dict[str, Any]] = []
            _collect_specs(header, specs)
            if not specs:
                return _restore_tensors(header, [])  # tuples, still tagged
            total = _checked_nbytes(specs, count)
            if max_tensor_bytes is not None and total > max_tensor_bytes:
                raise TooLarge(f"the reply holds {total} bytes of tensors, more than the "
                               f"{max_tensor_bytes} expected")
            places = _places(header, into(header) if into else {})  # what it drops, freed
            if self.cuda_ipc and total >= RELEASE_BYTES:
                _release_cache()  # the last message's blocks, freed above, before this one's
            tensors = [self._recv_tensor(spec, places.get(_index(spec)))
                       for spec in sorted(specs, key=_index)]
            if self.acknowledge and any("ipc" in spec for spec in specs):
                self._conn.send_bytes(COPIED)
            return _restore_tensors(header, tensors)
        except (EOFError, ConnectionResetError, OSError) as exc:
            raise ChannelClosed(str(exc) or "end of stream") from exc
        except (KeyError, TypeError, IndexError) as exc:  # a structure the peer made up
            raise messages.ProtocolError(f"a message's structure is malformed "
                                         f"({type(exc).__name__}: {exc})") from None

    def _free_exported(self) -> None:
        for exported in self._exported:
            exported.free()
        self._exported.clear()

    def _recv_tensor(self, spec: dict[str, Any], place: Any = None) -> Any:
        """Receive one tensor's bytes straight into its own storage (no extra copies): into
        `place` where it fits, else a new tensor."""
        import torch

        dtype = getattr(torch, spec["dtype"])
        shape = tuple(spec["shape"])
        if place is not None and not _fits(place, spec, dtype, device="ipc" in spec):
            place = None
        if "ipc" in spec:
            from krung.protocol.cuda_ipc import import_copy

            ipc = spec["ipc"]
            copied = import_copy(ipc["handle"], dtype, shape, ipc.get("offset", 0), into=place)
            return copied if place is not None else _with_strides(copied, spec)
        tensor = place if place is not None else torch.empty(shape, dtype=dtype)
        if tensor.numel() == 0:
            self._conn.recv_bytes(MAX_FRAME_BYTES)
            return tensor
        buffer = tensor.reshape(-1).view(torch.uint8).numpy()
        try:
            size = self._conn.recv_bytes_into(buffer)
        except BufferTooShort:
            raise ValueError(f"tensor frame larger than its {shape} {dtype} spec") from None
        if size != buffer.nbytes:
            raise ValueError(f"tensor frame of {size} bytes for a {shape} {dtype} tensor")
        return tensor if place is not None else _with_strides(tensor, spec)

    def close(self) -> None:
        self._free_exported()
        self._conn.close()


# Tensors of at least this many bytes in one message: the sender first hands its cached free
# device memory back to the driver (torch keeps what a process freed for itself alone, so at
# declared sizes the peer's copies would not fit beside it).
RELEASE_BYTES = 1 << 28


def _release_cache() -> None:
    import torch

    torch.cuda.empty_cache()


def spawn(module: str, args: list[str], *, log: Path, env: dict[str, str] | None = None,
          new_session: bool = False, prefix: list[str] | None = None,
          cwd: Path | None = None) -> tuple[subprocess.Popen, Channel]:
    """Start `python -m module` (under `prefix`, a tool such as compute-sanitizer) with a
    private channel and its output going to `log`, in `cwd` (this process's by default)."""
    parent_end, child_end = socket.socketpair()
    child_fd = child_end.fileno()
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", module, "--fd", str(child_fd), *args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            pass_fds=(child_fd,), env=env, start_new_session=new_session, cwd=cwd,
        )
    child_end.close()
    connection = Connection(os.dup(parent_end.fileno()))
    parent_end.close()
    return process, Channel(connection)


def tensor_spec(tensor: Any) -> dict[str, Any]:
    """What a tensor is, beyond its values: enough to check an output's contract."""
    import torch

    strided = tensor.layout == torch.strided
    return {
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()) if strided else None,
        "layout": str(tensor.layout).removeprefix("torch."),
        "device": str(tensor.device),
        "type": f"{type(tensor).__module__}.{type(tensor).__qualname__}",
    }


def _replace_tensors(value: Any, tensors: list[Any]) -> Any:
    if _is_tensor(value):
        tensors.append(value)
        return {TENSOR_KEY: len(tensors) - 1, **tensor_spec(value)}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _replace_tensors(v, tensors) for k, v in value.items()}
        return {ITEMS_KEY: [[_replace_tensors(k, tensors), _replace_tensors(v, tensors)]
                            for k, v in value.items()]}
    if isinstance(value, tuple):
        return {TUPLE_KEY: [_replace_tensors(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_replace_tensors(v, tensors) for v in value]
    return value


def _collect_specs(value: Any, specs: list[dict[str, Any]]) -> None:
    if isinstance(value, dict):
        if TENSOR_KEY in value:
            specs.append(value)
        else:
            for v in value.values():
                _collect_specs(v, specs)
    elif isinstance(value, list):
        for v in value:
            _collect_specs(v, specs)


def _checked_nbytes(specs: list[dict[str, Any]], frames: Any) -> int:
    """The bytes the tensors `specs` describe, once they are found well formed (numbered
    0..n-1, each with a dtype torch knows and a shape of sizes, as many raw frames announced
    as they need), before anything is allocated for them."""
    import torch

    def wrong(why: str) -> messages.ProtocolError:
        return messages.ProtocolError(f"a message's tensors are malformed: {why}")

    if sorted(s[TENSOR_KEY] for s in specs) != list(range(len(specs))):
        raise wrong("not numbered 0..n-1")
    for spec in specs:
        if not isinstance(getattr(torch, str(spec.get("dtype")), None), torch.dtype):
            raise wrong(f"dtype {spec.get('dtype')!r}")
        shape = spec.get("shape")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise wrong(f"shape {shape!r}")
        ipc = spec.get("ipc")
        if ipc is not None and not (isinstance(ipc, dict) and isinstance(ipc.get("handle"), str)
                                    and type(ipc.get("offset", 0)) is int
                                    and ipc.get("offset", 0) >= 0):
            raise wrong(f"IPC description {ipc!r}")
    framed = sum("ipc" not in s for s in specs)
    if frames != framed:
        raise wrong(f"{frames!r} frames announced, {framed} described")
    return sum(_nbytes(s) for s in specs)


def _nbytes(spec: dict[str, Any]) -> int:
    import torch

    count = 1
    for size in spec["shape"]:
        count *= max(int(size), 0)
    return count * getattr(torch, spec["dtype"]).itemsize


def _index(spec: dict[str, Any]) -> int:
    return int(spec[TENSOR_KEY])


def _restore_tensors(value: Any, tensors: list[Any]) -> Any:
    if isinstance(value, dict):
        if TENSOR_KEY in value:
            return tensors[_index(value)]
        if TUPLE_KEY in value and len(value) == 1:
            return tuple(_restore_tensors(v, tensors) for v in value[TUPLE_KEY])
        if ITEMS_KEY in value and len(value) == 1:
            return {_restore_tensors(k, tensors): _restore_tensors(v, tensors)
                    for k, v in value[ITEMS_KEY]}
        return {k: _restore_tensors(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_tensors(v, tensors) for v in value]
    return value


def _places(header: dict[str, Any], into: dict[str, Any]) -> dict[int, Any]:
    """Our tensors that `header`'s tensors go into, by the header's numbering: each field's
    tensors paired with `into`'s tensors for it in the same order (depth first), a field
    whose count differs left out."""
    places: dict[int, Any] = {}
    for field, ours in into.items():
        specs: list[dict[str, Any]] = []
        _collect_specs(header.get(field), specs)
        mine = leaves(ours)
        if len(specs) == len(mine):
            places.update((_index(spec), tensor) for spec, tensor in zip(specs, mine, strict=True))
    return places


def _fits(place: Any, spec: dict[str, Any], dtype: Any, device: bool) -> bool:
    """Whether `place`, one of our tensors, can take the tensor `spec` describes as it comes:
    the same dtype and shape, dense row-major as the bytes are, on the GPU for IPC's device
    bytes (else in host memory for a frame's)."""
    return (place.dtype == dtype and list(place.shape) == list(spec["shape"])
            and place.is_contiguous() and place.is_cuda == device and not place.requires_grad
            and (not spec.get("stride") or list(place.stride()) == list(spec["stride"])
                 or place.numel() <= 1))


def _with_strides(tensor: Any, spec: dict[str, Any]) -> Any:
    """The row-major `tensor` laid out with the sender's strides, when those describe a dense
    layout (a permutation of the dimensions, e.g. column-major); otherwise as it is."""
    stride = spec.get("stride")
    if not stride or list(tensor.stride()) == list(stride) or not _dense(spec["shape"], stride):
        return tensor
    import torch

    laid_out = torch.empty_strided(tuple(spec["shape"]), tuple(stride), dtype=tensor.dtype,
                                   device=tensor.device)
    laid_out.copy_(tensor)
    return laid_out


def _dense(shape: list[int], stride: list[int]) -> bool:
    """Whether the strides cover exactly numel elements, each once (no gaps, no overlap)."""
    dims = sorted((s, n) for s, n in zip(stride, shape, strict=True) if n > 1)
    if any(n == 0 for n in shape):
        return False
    expected = 1
    for step, size in dims:
        if step != expected:
            return False
        expected *= size
    return True


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _tensor_bytes(tensor: Any) -> Any:
    """A view of the tensor's bytes in host memory (copied only if it is not already there)."""
    flat = tensor.detach().reshape(-1).contiguous().cpu()
    if flat.numel() == 0:
        return b""
    import torch

    return memoryview(flat.view(torch.uint8).numpy())
