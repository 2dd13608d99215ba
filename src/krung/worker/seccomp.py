"""No network sockets for the version's process: a seccomp filter, the part of the walls
(krung.worker.guard.restrict) that Landlock lacks. Landlock refuses TCP bind and connect
only (from ABI 4); a version could still send UDP, or open a raw or packet socket.

The filter (classic BPF, installed with the seccomp syscall and SECCOMP_FILTER_FLAG_TSYNC,
so every thread of the process has it, those torch started already too, and every process
it starts inherits it; it cannot be removed) makes these calls fail with EPERM (Python's
PermissionError):
- `socket()` for any family but AF_UNIX and AF_NETLINK: no IPv4 or IPv6 socket (TCP, UDP,
  raw), no packet socket, no other family that reaches out (vsock, ...). Unix sockets and
  socketpairs stay open: the judge's channel is one, and the GPU stack uses them;
- `io_uring_setup`: io_uring opens sockets without calling socket();
- any call made under another ABI (x86-64's 32-bit `int 0x80` and x32), where socketcall
  hides its family in memory a filter cannot read.

Linux 3.17 or later (the seccomp syscall, TSYNC), on x86-64 or aarch64; elsewhere nothing is
installed and the result says why. Stdlib (ctypes) only: this module is imported by the worker.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# The native ABI of each machine: AUDIT_ARCH_*, and the numbers of the calls the filter
# names: socket, io_uring_setup, seccomp.
_ARCHES = {
    "x86_64": {"arch": 0xC000003E, "socket": 41, "io_uring_setup": 425, "seccomp": 317},
    "aarch64": {"arch": 0xC00000B7, "socket": 198, "io_uring_setup": 425, "seccomp": 277},
}
_X32_SYSCALL_BIT = 0x40000000  # x86-64: a call number at or above it is an x32 call
_AF_UNIX, _AF_NETLINK = 1, 16
_EPERM = 1

# Classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
# (little-endian on both machines: the low word of args[0] is at offset 16).
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_SET_MODE_FILTER, _FILTER_FLAG_TSYNC = 1, 1
_PR_SET_NO_NEW_PRIVS = 38

_installed: dict[str, str] | None = None  # process-wide once installed: a second is no use


def deny_ip_sockets() -> dict[str, str]:
    """Install the filter for the whole process; what applied: {"ip_sockets": "denied"}, or
    {"ip_sockets": "open", "ip_sockets_why": ...} where this machine or kernel cannot (never
    raises; its own key for the reason, beside Landlock's "why" in the sandbox's report).
    Sets PR_SET_NO_NEW_PRIVS, which seccomp requires of a process without CAP_SYS_ADMIN."""
    global _installed
    if _installed is not None:
        return dict(_installed)
    machine = os.uname().machine if sys.platform == "linux" else sys.platform
    numbers = _ARCHES.get(machine)
    if numbers is None:
        return {"ip_sockets": "open", "ip_sockets_why": f"no seccomp filter for {machine} "
                "(only for Linux on x86-64 or aarch64)"}
    try:
        _install(_program(numbers, x32=machine == "x86_64"), numbers["seccomp"])
    except OSError as exc:
        return {"ip_sockets": "open", "ip_sockets_why": str(exc)}
    _installed = {"ip_sockets": "denied"}
    return dict(_installed)


def _program(numbers: dict[str, int], x32: bool) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jump if true, jump if false, k); jumps count the instructions
    skipped."""
    steps: list[tuple[int, Any, Any, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, "deny", numbers["arch"]),
        (_LD_W_ABS, 0, 0, _NR),
        *([(_JGE_K, "deny", 0, _X32_SYSCALL_BIT)] if x32 else []),
        (_JEQ_K, "deny", 0, numbers["io_uring_setup"]),
        (_JEQ_K, 0, "allow", numbers["socket"]),
        (_LD_W_ABS, 0, 0, _ARG0),
        (_JEQ_K, "allow", 0, _AF_UNIX),
        (_JEQ_K, "allow", "deny", _AF_NETLINK),
    ]
    labels = {"allow": len(steps), "deny": len(steps) + 1}
    steps += [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, _RET_ERRNO | _EPERM)]

    def offset(at: int, target: Any) -> int:
        return labels[target] - at - 1 if isinstance(target, str) else target

    return [(code, offset(i, jt), offset(i, jf), k) for i, (code, jt, jf, k) in enumerate(steps)]


def _install(program: list[tuple[int, int, int, int]], seccomp_nr: int) -> None:
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(program))(*[SockFilter(*step) for step in program])
    prog = SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    long = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, long(1), long(0), long(0), long(0)) != 0:
        raise _failed("prctl(PR_SET_NO_NEW_PRIVS)")
    done = libc.syscall(long(seccomp_nr), long(_SET_MODE_FILTER), long(_FILTER_FLAG_TSYNC),
                        ctypes.byref(prog))
    if done < 0:
        raise _failed("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC)")
    if done > 0:  # TSYNC names a thread that could not take the filter (one of its own)
        raise OSError(f"seccomp: thread {done} has a seccomp filter of its own; none installed")


def _failed(what: str) -> OSError:
    import ctypes

    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")
