"""The worker's defences against versions that game the checks.

All of it runs in the candidate's own process, so a determined version could undo any of it;
what it buys is that the easy tricks fail loudly, and the judge (which never runs the
version) still compares every output itself.

- `Sentinels`: what the worker's measurement runs through (krung's own timing, guard, channel
  and message code; the timer, clock, synchronisation and copy functions; the channel's
  encoder), as it was before the version was imported; a version that replaces any of it is
  caught.
- `poison`: before a call, memory the version's next allocations will reuse is filled with a
  byte pattern (0xFF makes NaN in every float type), so an output that is not fully written
  shows garbage instead of stale or zeroed values; on a CPU, `perturbed` has glibc fill every
  block it hands out during the call too (a large one comes fresh, zeroed, from the OS).
- `OpTrace`: the torch operators a call actually ran (TorchDispatchMode), to enforce a
  problem's ban on delegating its core operation, whatever names or tricks the source used.
- `OwnKernels`: the kernels of the version's own a call launched (Triton's, by name; on a
  GPU, when asked, every kernel CUPTI saw), so the judge tells a version that computes in its
  own kernel from one that only delegates to torch (`delegated`).
- `python_threads`: threads the version started and left running.
- `InputChanges`: before every timed call, a few elements of its input set change (and are
  put back after it), so no two timed calls see the same contents and a cache keyed on them
  replays a stale output, which the judge's check of the last call of every set catches.
- `adopt_orphans`: the worker becomes its descendants' subreaper, so a child the version
  double-forks or moves to a session of its own (`setsid`) stays below the worker, where the
  judge finds and ends it with the run (krung.judge.candidate.end_tree).
- `restrict`: the walls raised before the version is imported, which it cannot take down:
  Landlock, where the kernel has it (no root needed). The process and everything it starts
  may read anything but write only the folders it is given (its scratch, its own compile caches,
  the run's artifact folders, /dev); from Landlock ABI 4 it may neither connect nor bind a
  TCP port; from ABI 6 it may not signal processes outside its sandbox. Beside Landlock (and
  without it, where the kernel lacks it), a seccomp filter (krung.worker.seccomp) refuses
  every IP socket, UDP and raw ones too.

Stdlib (ctypes too) and torch only: this module is imported by the worker.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

NAN_BYTE = 0xFF  # all-ones: NaN in float16/bfloat16/float32/float64, -1 in integers
OTHER_BYTE = 0x7F  # a second pattern, for the determinism rung's second call
M_PERTURB = -6  # glibc's mallopt parameter: fill each allocation with the byte ^ 0xFF


# The stdlib modules the worker's own code runs through once the version is imported: the
# builtins, clocks and statistics of the timing, and the channel's encoder and socket.
WATCHED_STDLIB = ("builtins", "time", "math", "statistics", "itertools", "functools",
                  "contextlib", "dataclasses", "json", "json.encoder",
                  "multiprocessing.connection")
# torch's functions timing, poisoning and the copy and encoding of outputs call (what the
# worker looks up in torch after the import: torch's own namespace is too large to watch).
WATCHED_TORCH = (
    "cuda.synchronize", "cuda.Event", "cuda.Event.record", "cuda.Event.elapsed_time",
    "cuda.Event.synchronize", "cuda._sleep", "cuda.current_stream", "equal", "allclose",
    "empty", "Tensor", "Tensor.__torch_function__", "Tensor.__torch_dispatch__",
    "Tensor.clone", "Tensor.detach", "Tensor.reshape", "Tensor.contiguous", "Tensor.cpu",
    "Tensor.view", "Tensor.numpy", "Tensor.copy_", "Tensor.zero_", "Tensor.fill_",
    "Tensor.index_put_", "Tensor.stride", "Tensor.numel", "Tensor.element_size",
    "Tensor.__getattribute__", "Tensor.__setattr__", "profiler.profile")


class Sentinels:
    """What the worker's own measurement runs through, as it was when it was bound (before
    the version was imported), so that a version that patches any of it is caught after the
    request it did so in (`tampered`, checked by the judge after every request):

    - the functions, classes and public constants of krung's modules loaded then (the
      timing, this guard, the channel, the messages), and the module objects in sys.modules;
      every function's code object and defaults; every method and descriptor in the
      dictionaries of their classes (`Samples.to_json`, `Channel.send`), none added;
    - the functions and classes of the stdlib modules `WATCHED_STDLIB`, and the methods
      of their classes (the JSON encoder, the socket's connection);
    - torch's functions `WATCHED_TORCH`;
    - `objects`, the worker's own (its channel and its connection, the version's thread):
      no attribute set on one shadows a method of its class, and those that hold another
      of them still do.

    Python-level only: native code, ctypes writes, or a patch that undoes itself before the
    check are not seen (docs/trust.md says what bounds them)."""

    def __init__(self, objects: dict[str, Any] | None = None) -> None:
        import torch.profiler  # noqa: F401  (watched: loaded now, not by the version)

        self.objects = dict(objects or {})
        self.modules = [n for n in sorted(sys.modules) if n == "krung" or n.startswith("krung.")]
        self.modules += [n for n in WATCHED_STDLIB if n in sys.modules]
        self.bound = self._current()

    def _current(self) -> dict[str, Any]:
        import torch

        found: dict[str, Any] = {}
        for path in WATCHED_TORCH:
            value: Any = torch
            for part in path.split("."):
                value = _static(value, part)
            found[f"torch.{path}"] = value
        for name in self.modules:
            module = sys.modules.get(name)
            found[f"sys.modules[{name!r}]"] = module
            if module is not None:
                _module_entries(name, module, found)
        kept = list(self.objects.values())
        for label, obj in self.objects.items():
            for key, value in list(vars(obj).items()):
                if callable(_static(type(obj), key)):  # shadows a method of its class
                    found[f"{label}.{key} (set on the instance)"] = value
                elif callable(value) or any(value is k for k in kept):
                    found[f"{label}.{key}"] = value
        return found

    def tampered(self) -> list[str]:
        """The names of what changed since the sentinels were bound, sorted; [] if nothing.
        Added: a name in a watched module or class, a method shadowed on an object (an
        object's own new attributes, such as the worker's entry point, are its state)."""
        now = self._current()
        changed = {label for label, value in self.bound.items()
                   if label not in now or now[label] is not value}
        for label in now.keys() - self.bound.keys():
            if label.endswith("(set on the instance)"):
                changed.add(label)
            elif label.split(".")[0] not in self.objects:
                changed.add(f"{label} (added)")
        # A replaced function: its name says it, not its code and defaults as well.
        return sorted(c for c in changed if c.rsplit(".", 1)[0] not in changed
                      and f"{c.rsplit('.', 1)[0]} (added)" not in changed)


# What torch itself sets on tensors it returns (torch.compile's outputs carry
# `_dynamo_propagated_dynamic_indices`, a set): data, not methods, so an output may carry them.
TORCH_MARKS = ("_dynamo_",)


class PlainOutputs:
    """How the worker takes a version's outputs, with builtins and torch functions bound
    before the version is imported: it could replace torch's, or return a tensor with a
    method set on it (`clone`, `detach`) that computes the result when krung copies it,
    outside the calls' trace and time. An output is a plain torch.Tensor (that exact type)
    with nothing set on it but torch's own data (TORCH_MARKS), in a tuple or list if several
    (read from its storage), copied with `torch.Tensor.clone` as bound here (`copy`), never
    through the tensor's attributes."""

    def __init__(self) -> None:
        import torch

        self.tensor, self.strided = torch.Tensor, torch.strided
        self.clone = torch.Tensor.clone
        self.address = torch.Tensor.data_ptr
        self.layout = _static(torch.Tensor, "layout").__get__
        self.type, self.vars, self.list, self.subclass = type, vars, list, issubclass
        self.callable = callable
        # A tuple's items read from its storage: a subclass's own __iter__ never runs (torch's
        # named tuples, such as torch.return_types.max, are tuples).
        self.tuple_items, self.list_items = tuple.__iter__, list.__iter__

    def is_sequence(self, value: Any) -> bool:
        return self.subclass(self.type(value), (tuple, list))

    def items(self, value: Any) -> list[Any]:
        tuple_like = self.subclass(self.type(value), tuple)
        return self.list((self.tuple_items if tuple_like else self.list_items)(value))

    def problem(self, i: int, output: Any) -> str | None:
        """Why output `i` cannot be taken as it is; None if it can."""
        kind = self.type(output)
        if kind is not self.tensor:
            if isinstance(output, self.tensor):
                return (f"output {i} is a {kind.__qualname__} (a subclass of torch.Tensor), "
                        "not a plain torch.Tensor")
            return f"output {i} is a {kind.__name__}, not a torch.Tensor"
        attributes = sorted(name for name, value in self.vars(output).items()
                            if not (name.startswith(TORCH_MARKS) and not self.callable(value)))
        if attributes:
            return (f"output {i} has attributes set on it ({', '.join(attributes[:5])}): "
                    "an output is taken as it is, and a method set on it would run when "
                    "krung copies it, outside the call")
        layout = self.layout(output)
        if layout is not self.strided:
            return f"output {i} has layout {layout}, not torch.strided"
        return None

    def copy(self, output: Any) -> Any:
        return self.clone(output)

    def listed(self, result: Any) -> list[Any]:
        """A call's result as its list of outputs."""
        return self.items(result) if self.is_sequence(result) else [result]

    def tensors(self, result: Any) -> list[Any]:
        """The outputs of a call's result that can be taken as they are (`problem`)."""
        return [o for n, o in enumerate(self.listed(result)) if self.problem(n, o) is None]


def _static(owner: Any, name: str) -> Any:
    """`owner.name` as stored (no descriptor called: a classmethod stays one object), through
    a class's MRO; None where missing."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
        return None
    try:
        return vars(owner).get(name)
    except TypeError:  # no __dict__
        return getattr(owner, name, None)


def _module_entries(name: str, module: Any, found: dict[str, Any]) -> None:
    """Into `found`, label -> object for what `Sentinels` watches in one module: its
    functions, classes and modules (krung's: its public constants too), each function's
    code and defaults, each class's methods and descriptors (of its own classes)."""
    import types

    own = name == "krung" or name.startswith("krung.")
    for key, value in list(vars(module).items()):
        if isinstance(value, types.ModuleType):
            if value.__name__ == f"{name}.{key}" or key.startswith("__"):
                continue  # a submodule, bound when it is imported: not the version's doing
            found[f"{name}.{key}"] = value
        elif callable(value) or (own and not key.startswith("_")):
            found[f"{name}.{key}"] = value
            _code_of(f"{name}.{key}", value, found)
        if isinstance(value, type) and value.__module__ == name and name != "builtins":
            for attr, member in list(vars(value).items()):
                if callable(member) or hasattr(member, "__get__"):
                    found[f"{name}.{key}.{attr}"] = member
                    _code_of(f"{name}.{key}.{attr}", member, found)


def _code_of(label: str, value: Any, found: dict[str, Any]) -> None:
    """A function's code object and defaults (through staticmethod, classmethod, property)."""
    for fn in (getattr(value, "__func__", None), getattr(value, "fget", None), value):
        if hasattr(fn, "__code__"):
            found[f"{label}.__code__"] = fn.__code__
            found[f"{label}.__defaults__"] = fn.__defaults__
            found[f"{label}.__kwdefaults__"] = fn.__kwdefaults__
            return


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
    """Records the torch operators run inside the `with` block.

    `lean`: torch wraps a mode's `__torch_dispatch__` in Dynamo's disable, whose first call
    imports torch._dynamo: 1.5-3 s of CPU in every judge and worker (torch 2.13, 2-core CPU
    machine), for a trace that never meets torch.compile unless the code it watches compiles.
    A lean trace skips the wrap while Dynamo is not loaded. On by default on a CPU only: on a
    GPU it waits for the GPU gate (docs/development.md)."""

    def __init__(self, lean: bool = False) -> None:
        self.ops: set[str] = set()
        self.lean = lean

    def __enter__(self) -> OpTrace:
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops
        wrap = not self.lean or "torch._dynamo" in sys.modules

        class _Recorder(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:  # read once, as the class is made
                return wrap

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                ops.add(str(func.overloadpacket.__name__))
                return func(*args, **(kwargs or {}))

        self._mode = _Recorder()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


class OwnKernels:
    """The Triton kernels launched inside the `with` block (`names`), from the launch log
    (krung.worker.launches: under the interpreter and on a GPU alike); with `device`, also
    the name of every kernel the GPU ran (`device_names`, CUPTI through torch's profiler;
    None where the profiler cannot start), for kernels of other DSLs, which the judge tells
    apart from the library kernels the reference launches too, and each one's device time
    over the block (`device_ns`: whose kernels carried the work). The profiler's end
    synchronises the device: leave the block after the outputs are copied."""

    def __init__(self, device: bool = False) -> None:
        self.device = device
        self.names: list[str] = []
        self.device_names: list[str] | None = None
        self.device_ns: dict[str, int] | None = None
        self._profiler: Any = None

    def __enter__(self) -> OwnKernels:
        self._before = _triton_launches()
        if self.device:
            from krung.worker.timing import profiler_session

            self._session = profiler_session()  # CUPTI's one owner; None: names unknown
            self._profiler = self._session.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device:
            self._session.__exit__(None, None, None)
        if self._profiler is not None:
            from krung.worker.timing import device_work

            self.device_ns = {}
            for event in device_work(self._profiler):
                # torch 2.11's events have no activity type: copies are told by their names
                if _kind(event) == "kernel" and not event.name().startswith(COPIES):
                    name = event.name()
                    self.device_ns[name] = self.device_ns.get(name, 0) + event.duration_ns()
            self.device_names = sorted(self.device_ns)
        after = _triton_launches()
        self.names = sorted(n for n, count in after.items() if count > self._before.get(n, 0))


COPIES = ("Memcpy ", "Memset ")  # CUPTI's names of copies and fills, which are no kernels


def _kind(event: Any) -> str:
    return event.activity_type() if hasattr(event, "activity_type") else "kernel"


def _triton_launches() -> dict[str, int]:
    """Launches so far per Triton kernel name (none where the version does not use Triton)."""
    from krung.worker import launches

    log = launches.current()
    counts: dict[str, int] = {}
    if log is None:
        return counts
    for record in list(log.described.values()):
        counts[record["name"]] = counts.get(record["name"], 0) + record["launches"]
    for fn, _, count in list(log.compiled.values()):
        name = getattr(getattr(fn, "fn", None), "__name__", None) or str(fn)
        counts[name] = counts.get(name, 0) + count
    return counts


class InputChanges:
    """Before each timed call (outside the timed region), `elements` random elements of each
    chosen tensor of the call's input set take the values of other elements of the same
    tensor (so the values stay ones the problem's generator made; zeros stay zeros, so
    triangular or masked inputs keep their zeros); before the set's next call
    they are put back. Each set's last change stays in place after the timing (an output that
    is a view of an input still shows what the call saw) and is reported: the judge applies
    it to its own copy of the set to check the last output of the timed calls on it.

    `leaves[i]` names the tensors of set i that may change (floating point, not output
    buffers); the positions come from a generator on the tensors' device (no host sync)."""

    def __init__(self, sets: list[list[Any]], leaves: list[list[int]], elements: int,
                 seed: int) -> None:
        from krung.protocol.tree import leaves as tensors_of

        self.elements = elements
        self.seed = seed
        self.targets = [[(n, tensors_of(s)[n]) for n in chosen if tensors_of(s)[n].numel() > 1]
                        for s, chosen in zip(sets, leaves, strict=True)]
        self.generators: dict[str, Any] = {}
        self.pending: list[list[tuple[Any, tuple, Any]]] = [[] for _ in sets]
        self.last: list[list[tuple[int, Any, Any]]] = [[] for _ in sets]

    def before(self, i: int) -> None:
        import torch

        from krung.protocol.tree import unravel

        for tensor, index, saved in reversed(self.pending[i]):
            tensor.index_put_(index, saved)
        self.pending[i] = []
        changed = []
        for leaf, tensor in self.targets[i]:
            count = tensor.numel()
            generator = self._generator(tensor.device)
            where = torch.randint(count, (self.elements,), device=tensor.device,
                                  generator=generator)
            shift = torch.randint(1, count, (1,), device=tensor.device, generator=generator)
            index = unravel(where, tensor.shape)
            current = tensor[index]
            # Zeros stay zeros: a triangular, banded or zero-masked input keeps its shape.
            values = torch.where(current != 0, tensor[unravel(
                (where + shift) % count, tensor.shape)], current)
            self.pending[i].append((tensor, index, current))
            tensor.index_put_(index, values)
            changed.append((leaf, where, values))
        self.last[i] = changed

    def report(self) -> list[list[dict[str, Any]]]:
        """Per set, the last change: the tensor's index among the set's leaves, the flat
        positions and the values written there (on the CPU)."""
        return [[{"leaf": leaf, "positions": where.cpu(), "values": values.cpu()}
                 for leaf, where, values in changed] for changed in self.last]

    def _generator(self, device: Any) -> Any:
        import torch

        key = str(device)
        if key not in self.generators:
            self.generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[key]


# The walls (Landlock) and the subreaper: prctl and raw syscalls through ctypes.

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64, arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# The file-system rights a ruleset handles (denied unless a rule allows them), by the ABI that
# brought them: ABI 1 WRITE_FILE (bit 1), REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR,
# MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM (bits 4-12); ABI 2 REFER; ABI 3
# TRUNCATE. Reading, executing and device ioctls are left unhandled: allowed everywhere.
_WRITES = {1: 1 << 1 | 0b1_1111_1111 << 4, 2: 1 << 13, 3: 1 << 14}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_SIGNAL = 1 << 1  # ABI 6


def _libc() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    return libc


def _failed(what: str) -> OSError:
    import ctypes

    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")


def adopt_orphans() -> bool:
    """Make this process the subreaper of its descendants; False where the OS refuses (or is
    not Linux)."""
    return sys.platform == "linux" and _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    if sys.platform != "linux":
        return 0
    abi = _libc().syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(int(abi), 0)


# A mount namespace of the worker's own, entered without root (user namespaces), so that the
# store can be hidden from the version: Landlock governs writes, not what may be read.
_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429  # the same on x86-64 and arm64 (Linux 5.2)
_OPEN_TREE_CLONE, _AT_RECURSIVE, _AT_FDCWD, _MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, -100, 4
_MNT_DETACH = 2


def private_mounts() -> str | None:
    """Enter a user and mount namespace of this process's own (its uid and gid mapped to
    themselves: its rights on files are unchanged), so that `hide` can later mount over
    folders without root and without anyone else seeing it. The kernel allows it only while
    the process has one thread: call it first. None, or why it could not be done."""
    if sys.platform != "linux":
        return "not Linux"
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        return f"{_failed('unshare(CLONE_NEWUSER | CLONE_NEWNS)')} (user namespaces refused)"
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
    except OSError as exc:
        return f"mapping the user namespace: {exc}"
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return str(_failed("making the mounts private"))
    return None


def hide(paths: list[str], keep: list[str]) -> list[str]:
    """Mount an empty read-only folder over each folder of `paths` (and /dev/null over each
    file), in this process's own mount namespace (`private_mounts`), so that what they hold
    cannot be read; each of `keep` beneath one is mounted back where it was. Before the walls:
    Landlock forbids changing mounts once raised, so the version cannot undo it. The paths
    hidden; OSError where the kernel refuses."""
    libc = _libc()
    hidden = []
    for path in paths:
        if os.path.isfile(path):
            if libc.mount(b"/dev/null", path.encode(), None, _MS_BIND, None) != 0:
                raise _failed(f"hiding {path}")
            hidden.append(path)
            continue
        if not os.path.isdir(path):
            continue
        inside = [k for k in keep if os.path.isdir(k) and _beneath(k, path)]
        trees = []  # copies of the kept folders' mounts, made before the folder is covered
        for folder in inside:
            fd = libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, folder.encode(),
                              _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC)
            if fd < 0:
                raise _failed(f"open_tree {folder}")
            trees.append((folder, fd))
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        if libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, b"mode=0755,size=64k") != 0:
            raise _failed(f"hiding {path}")
        try:
            for folder, fd in trees:
                os.makedirs(folder, exist_ok=True)  # in the empty folder: where it goes back
                if libc.syscall(_SYS_MOVE_MOUNT, fd, b"", _AT_FDCWD, folder.encode(),
                                _MOVE_MOUNT_F_EMPTY_PATH) < 0:
                    raise _failed(f"move_mount {folder}")
            if libc.mount(b"tmpfs", path.encode(), None, _MS_REMOUNT | _MS_RDONLY | flags,
                          None) != 0:
                raise _failed(f"making {path} read-only")
        except OSError:  # all or nothing: the run's own folder must not stay covered
            libc.umount2(path.encode(), _MNT_DETACH)
            raise
        finally:
            for _, fd in trees:
                os.close(fd)
        hidden.append(path)
    return hidden


def _beneath(path: str, folder: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(folder)]) == \
        os.path.abspath(folder)


def restrict(writable: list[str], network: bool = False) -> dict[str, Any]:
    """Allow writes only beneath `writable` (folders; those missing are skipped) and, unless
    `network`, no TCP and no signals out of the sandbox (Landlock), and no IP socket at all
    (seccomp: krung.worker.seccomp). The filter goes up whenever `network` is off, Landlock
    or not: it needs neither Landlock nor root, and a version that could not write outside
    its scratch but could send UDP would still reach the network. Returns what applied:
    {"sandbox": "landlock" | "none", "landlock_abi", "writable", "network", "ip_sockets",
    ...}; never raises (a wall the kernel refuses is reported as not applied)."""
    try:
        applied = _landlock(writable, network)
    except OSError as exc:  # Landlock refused: the filter still goes up
        applied = {"sandbox": "none", "why": str(exc)}
    if not network:
        from krung.worker.seccomp import deny_ip_sockets

        applied.update(deny_ip_sockets())
        if applied["ip_sockets"] == "denied":
            tcp = applied.get("network") == "no TCP"
            applied["network"] = "no TCP, no IP sockets" if tcp else "no IP sockets"
    return applied


def _landlock(writable: list[str], network: bool) -> dict[str, Any]:
    import ctypes

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneathAttr(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    abi = landlock_abi()
    if abi == 0:
        return {"sandbox": "none", "why": "the kernel has no Landlock (or it is disabled)"}
    libc = _libc()
    writes = sum(bits for since, bits in _WRITES.items() if abi >= since)
    attr = RulesetAttr(handled_access_fs=writes)
    size = 8  # the fields this kernel knows: a larger struct with fields it lacks is refused
    applied: dict[str, Any] = {"sandbox": "landlock", "landlock_abi": abi, "network": "open"}
    if abi >= 4 and not network:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP  # no rule: no port at all
        applied["network"] = "no TCP"
    if abi >= 4:
        size = 16
    if abi >= 6 and not network:  # abstract unix sockets stay open: the GPU stack may use them
        attr.scoped = _SCOPE_SIGNAL
        applied["signals"] = "to its own sandbox only"
    if abi >= 6:
        size = 24
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        raise _failed("landlock_create_ruleset")
    allowed: list[str] = []
    try:
        for folder in dict.fromkeys(writable):
            try:
                fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:  # missing, or not a folder: nothing to allow
                continue
            try:
                rule = PathBeneathAttr(allowed_access=writes, parent_fd=fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH,
                                ctypes.byref(rule), 0) < 0:
                    raise _failed(f"landlock_add_rule {folder}")
            finally:
                os.close(fd)
            allowed.append(folder)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _failed("prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) < 0:
            raise _failed("landlock_restrict_self")
    finally:
        os.close(ruleset)
    applied["writable"] = allowed
    return applied


class VersionThread:
    """The one place the version's code runs: its import and every call, checked or timed,
    from the same frame of one thread, so that from inside the version (`inspect.stack()`,
    its frames, depth and lines, the thread it runs on, its arguments, the environment) a
    checked call and a timed one look the same. What differs between them, the guard's work
    and the timer's, is done by `start` and `end`, which run in this thread just before and
    just after the call (the timer's clock reads and events stay next to the call: handing
    a call to this thread costs about 20 us, outside the timed region) and have returned
    before the version's code runs. Thread-local state the version sets at import (torch's
    grad mode, default device) holds in its calls, as it would in a process of its own."""

    def __init__(self) -> None:
        self._go = threading.Lock()
        self._done = threading.Lock()
        self._go.acquire()
        self._done.acquire()
        self._job: tuple[Any, tuple, Any, Any] | None = None
        self._outcome: tuple[bool, Any] = (True, None)
        device = _cuda_device()
        self._thread = threading.Thread(target=self._serve, args=(device,), name="krung-version",
                                        daemon=True)
        self._thread.start()

    def run(self, fn: Any, args: tuple | list = (), start: Any = None, end: Any = None) -> Any:
        """`fn(*args)` in the version's thread, `start()` and `end()` around it there;
        what it returns, or what it raised, raised here."""
        self._job = (fn, tuple(args), start, end)
        self._go.release()
        self._done.acquire()
        ok, value = self._outcome
        self._outcome = (True, None)
        if not ok:
            raise value
        return value

    def _serve(self, device: int | None) -> None:
        if device is not None:  # the device the worker's main thread uses
            import torch

            torch.cuda.set_device(device)
        while True:
            self._go.acquire()
            self._begin()
            try:
                self._outcome = (True, self._call())
            except BaseException as exc:  # SystemExit too: the worker reports it
                self._outcome = (False, exc)
            try:
                self._finish()
            except BaseException as exc:
                self._outcome = (False, exc)
            self._done.release()

    def _begin(self) -> None:
        start = self._job[2] if self._job else None
        if start is not None:
            start()

    def _call(self) -> Any:
        fn, args = self._job[:2] if self._job else (None, ())
        return fn(*args)  # every call of the version is made from this line

    def _finish(self) -> None:
        end = self._job[3] if self._job else None
        self._job = None
        if end is not None:
            end()


def _cuda_device() -> int | None:
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda.current_device()


def own_triton_kernels(module: Any) -> dict[int, str]:
    """The Triton kernels the version's module defines (@triton.jit functions among its
    globals, under @triton.autotune or @triton.heuristics too): the id of each one's Python
    function, and its name. Kernels it imports from elsewhere are not its own."""
    import inspect

    found: dict[int, str] = {}
    for value in list(vars(module).values()):
        if not type(value).__module__.startswith("triton"):
            continue
        fn = value
        for _ in range(8):  # Autotuner -> Heuristics -> JITFunction -> the function
            if inspect.isfunction(fn) or not hasattr(fn, "fn"):
                break
            fn = fn.fn
        if inspect.isfunction(fn) and fn.__module__ == module.__name__:
            found[id(fn)] = fn.__name__
    return found


def call_record(kernels: dict[int, str]) -> dict[str, Any]:
    """What one call did besides its outputs, from the launch log (krung.worker.launches)
    and the watched extensions (`watch_extensions`): `own_kernels`, the launches of each of
    the version's own Triton kernels in the call (0: not launched); `swallowed`, the errors
    that came out of a kernel's compile or launch during the call, which the version caught
    (the call returned)."""
    import sys

    launches = sys.modules.get("krung.worker.launches")
    log = launches.current() if launches is not None else None
    ran, escaped = log.take_call_record() if log is not None else ({}, [])
    escaped = escaped + _extension_errors
    _extension_errors.clear()
    record: dict[str, Any] = {}
    if kernels:
        record["own_kernels"] = {name: ran.get(key, 0) for key, name in kernels.items()}
    if escaped:
        record["swallowed"] = escaped
    return record


_extension_errors: list[dict[str, Any]] = []  # since the last call_record


def watch_extensions(module: Any) -> list[str]:
    """Wrap the functions of the compiled extension modules the version's module holds (what
    torch's load_inline or load built for it: a CUDA C++ kernel's launcher), so that an error
    out of one (a CUDA launch error, a failed check) is noted on its way to the version, as
    Triton's are (krung.worker.launches); returns the modules' names. Extensions imported
    from installed packages are not the version's own."""
    import importlib.machinery
    import sys
    import types

    installed = tuple(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    installed += (sys.base_prefix, sys.prefix)
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    watched = []
    for value in list(vars(module).values()):
        path = getattr(value, "__file__", None) or ""
        if not isinstance(value, types.ModuleType) or not path.endswith(suffixes) or \
                path.startswith(installed) or getattr(value, "_krung_watched", False):
            continue
        for name, fn in list(vars(value).items()):
            if not name.startswith("_") and isinstance(fn, types.BuiltinFunctionType):
                setattr(value, name, _noting_errors(fn, f"{value.__name__}.{name}"))
        value._krung_watched = True
        watched.append(value.__name__)
    return watched


def _noting_errors(fn: Any, label: str) -> Any:
    import functools

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noted, raised as it was
            if len(_extension_errors) < 64:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                _extension_errors.append({"type": type(exc).__name__, "message": first,
                                          "kernel": label})
            raise

    return call
