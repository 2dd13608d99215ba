"""The messages between krung's processes: one small dataclass per message, in tagged unions.

Four conversations cross a process boundary:
- host and judge (krung.host.evaluate, krung.judge.serve): the host sends one `Request`; the
  judge sends `ready` (a pooled judge, before it), then `env`, `progress`, `calibration`,
  `rung`, and at the end `done`, `problem_error` or `error`. Tag: `type`.
- judge and worker (krung.judge.candidate, krung.worker.serve): the worker says `Hello` once,
  then answers each request (`load`, `call`, `time`, `kernels`, `trace`, `profile`; tag: `op`)
  with that request's reply (`ok: true`) or a `Failed` (`ok: false`).
- a client and the warm service (krung.host.service): `acquire`, `prime`, `pool`, `exit`,
  `status`, `stop` (tag: `op`), each answered by its reply or a `Refused`.
- the artifacts rung and its build process (krung.judge.rungs.artifacts.build), which imports
  the version too: `build`, answered by `Built` or a `Failed`.

`decode` checks a message against its declaration (its tag, every field's type, no field
that is not declared) and raises ProtocolError otherwise: the worker runs the version, which
can write anything to the channel. Tensors travel as raw frames (krung.protocol.channel),
put back in their place before a message is decoded; an output declared a tensor must be
one. `schema()` is the JSON Schema of the messages as they travel.

A message also reads as the dict it travels as (`reply["outputs"]`, `reply.get("autotune")`:
the fields that are not None), so code written against dicts reads it unchanged; new code
reads attributes. Stdlib only: the worker imports this module.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, Required, TypedDict, Union

TENSOR, TENSORS = "tensor", "tensors"
# One torch.Tensor, which travels as a raw frame (the channel puts it back in its place).
Tensor = Annotated[Any, TENSOR]
# A structure that may hold tensors (lists, tuples, dicts, scalars), as inputs are.
Tensors = Annotated[Any, TENSORS]


class ProtocolError(ValueError):
    """A message krung does not declare: an unknown tag, a field missing or not declared, a
    value of the wrong type."""


class VersionChanged(Exception):
    """The run's copy of a version, which a request names with its sha256, holds other bytes
    than those the host read and stored."""


class Message(Mapping[str, Any]):
    """Base of every message: a frozen dataclass that also reads as the dict it travels as
    (the fields that are not None, and `ok` for a reply), for code written against dicts."""

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key) if key in _names(type(self)) else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (n for n in _names(type(self)) if getattr(self, n) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Tagged(Message):
    """A message that says what it is: `KEY` (type or op) holds its `TAG` on the wire."""

    KEY: ClassVar[str]
    TAG: ClassVar[str]


class Reply(Message):
    """An answer to one request; `ok` on the wire tells it from a failure."""

    ok: ClassVar[bool] = True


class Ask(Tagged):
    """A request answered by its `REPLY`, or by the conversation's `FAILURE`."""

    KEY = "op"
    REPLY: ClassVar[type[Reply]]
    FAILURE: ClassVar[type[Reply]]


# Records inside messages: plain dicts, typed.


class ErrorRecord(TypedDict, total=False):
    """What went wrong in the worker (krung.worker.explain), with the fix."""

    type: Required[str]
    message: Required[str]
    kind: str  # load, compile, runtime or internal
    hint: str | None
    location: str | None  # file:line in the version
    details: str | None


class TensorSpec(TypedDict):
    """What an output tensor is besides its values (krung.protocol.channel.tensor_spec)."""

    dtype: str
    shape: list[int]
    stride: list[int] | None
    layout: str
    device: str
    type: str


class SwallowedError(TypedDict):
    """An error that came out of a kernel's compile or launch during a call that returned:
    the version caught it (krung.worker.launches)."""

    type: str
    message: str
    kernel: str


class PoisonSpec(TypedDict):
    shape: list[int]
    dtype: str


class Poison(TypedDict):
    """Fill the memory an output of each of `specs` will likely get with `byte` first."""

    byte: int
    specs: list[PoisonSpec]


class JudgeSpecJson(TypedDict):
    """How a pooled judge is started (krung.host.service.JudgeSpec)."""

    device: str
    cuda_ipc: bool
    max_file_bytes: int
    env: dict[str, str]


class PoolStatus(TypedDict):
    device: str
    ready: int
    starting: int
    running: int
    broken: str | None


# Host and judge.


class ToJudge(Tagged):
    KEY = "type"


class FromJudge(Tagged):
    KEY = "type"


@dataclass(frozen=True)
class Request(ToJudge):
    """The one evaluation a judge serves."""

    TAG = "request"
    problem: str
    solution: str  # the version's file as the user named it: errors name it
    version: str  # the run's copy of the bytes the host read, which judge and worker load
    sha256: str  # of those bytes: a copy that holds others is not loaded
    rungs: list[str]
    device: str
    seed: int
    run_dir: str
    cwd: str
    settings: dict[str, Any]  # krung.protocol.settings.Settings.to_json()
    precision: str | None = None
    calibrations: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Ready(FromJudge):
    """A pooled judge is warm: its worker started, the rungs imported."""

    TAG = "ready"


@dataclass(frozen=True)
class Env(FromJudge):
    """Facts for the run's record: pids, device, library versions."""

    TAG = "env"
    env: dict[str, Any]


@dataclass(frozen=True)
class Progress(FromJudge):
    """What the judge is doing; a heartbeat repeats the last one with the time since."""

    TAG = "progress"
    rung: str
    message: str
    heartbeat: bool = False


@dataclass(frozen=True)
class Calibration(FromJudge):
    """Device ceilings measured now, for the caller's store."""

    TAG = "calibration"
    entry: dict[str, Any]


@dataclass(frozen=True)
class RungDone(FromJudge):
    """One rung's result (krung.protocol.results.RungResult.to_json)."""

    TAG = "rung"
    result: dict[str, Any]


@dataclass(frozen=True)
class ProblemFailed(FromJudge):
    """The problem cannot be evaluated; each defect is [what is wrong, how to fix it]."""

    TAG = "problem_error"
    message: str
    defects: list[list[str]]
    hint: str | None = None


@dataclass(frozen=True)
class JudgeFailed(FromJudge):
    """The evaluation could not go on: a usage error (`usage`), or krung's own failure."""

    TAG = "error"
    message: str
    hint: str | None = None
    details: str | None = None
    usage: bool = False


@dataclass(frozen=True)
class Done(FromJudge):
    """Every rung was sent."""

    TAG = "done"


# Judge and worker: the replies first, as each request names its own.


@dataclass(frozen=True)
class Hello(Reply):
    """The worker's first word: it runs, on this device."""

    pid: int
    device: str
    torch: str
    python: str
    device_name: str
    cuda: str | None = None
    sm: str | None = None
    sms: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Failed(Reply):
    """The request failed: what the version raised, or why the worker could not do it."""

    ok = False
    error: ErrorRecord
    builds: list[dict[str, Any]] | None = None  # CUDA C++ builds torch ran meanwhile
    sandbox: dict[str, Any] | None = None  # a failed load: what the import ran inside


@dataclass(frozen=True)
class Loaded(Reply):
    load_s: float
    triton: str | None = None  # Triton's version, when the version uses Triton
    builds: list[dict[str, Any]] | None = None
    sandbox: dict[str, Any] | None = None  # what krung.worker.guard.restrict applied


@dataclass(frozen=True)
class Called(Reply):
    """One call's outputs and the version's conduct."""

    outputs: list[Tensor]
    specs: list[TensorSpec]
    tuple: bool  # the version returned a tuple (or list)
    call_s: float
    tampered: list[str]  # functions the version replaced (krung.worker.guard)
    threads_started: int
    builds: list[dict[str, Any]] | None = None
    ops: list[str] | None = None  # the torch operators it ran, when asked
    kernels: list[str] | None = None  # the Triton kernels it launched (krung.worker.guard)
    device_kernels: list[str] | None = None  # every kernel the GPU ran, when asked (CUPTI)
    device_kernel_ns: dict[str, int] | None = None  # and each one's device time over the call
    inputs_after: Tensors | None = None  # its inputs after the call, when asked
    # launches in this call of each Triton kernel the version's module defines (0: none)
    own_kernels: dict[str, int] | None = None
    # errors out of a kernel's compile or launch in this call that the version caught
    swallowed: list[SwallowedError] | None = None
    # work handed to libraries (krung.worker.library_calls): {"numpy": tensors handed over,
    # "symbols": ["cblas_sgemm (BLAS)", ...] resolved through ctypes}
    library: dict[str, Any] | None = None
    device_peak_mib: float | None = None  # the most device memory torch reserved so far (GPU)
    host_peak_mib: float | None = None  # the process's peak resident memory so far


@dataclass(frozen=True)
class Timed(Reply):
    """Samples of the timed calls, and each input set's last outputs."""

    samples: dict[str, Any]  # krung.worker.timing.Samples.to_json()
    outputs: list[list[Tensor]]  # per input set
    specs: list[list[TensorSpec]]
    tuple: bool
    tampered: list[str]
    threads_started: int
    autotune: list[dict[str, Any]] | None = None  # configs chosen before the timed calls
    # per set, the last change of its inputs before a timed call (krung.worker.guard)
    changed: Tensors | None = None
    device_peak_mib: float | None = None  # the most device memory torch reserved so far (GPU)
    host_peak_mib: float | None = None  # the process's peak resident memory so far
    # the calls returned one buffer: `outputs` are from one more call per set, each kept
    outputs_reused: bool = False


@dataclass(frozen=True)
class KernelsListed(Reply):
    launches: list[dict[str, Any]]
    compiled: list[dict[str, Any]]
    autotune: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Traced(Reply):
    launches: list[dict[str, Any]]  # krung.tracer's region records
    call_us: float


@dataclass(frozen=True)
class Profiled(Reply):
    pass


class ToWorker(Ask):
    FAILURE = Failed


@dataclass(frozen=True)
class Load(ToWorker):
    """Import the version and take its entry point."""

    TAG = "load"
    REPLY = Loaded
    path: str  # the version's file: the run's copy of its bytes
    entry: dict[str, Any] | None = None  # the entry the problem's format asks for (entries.py)
    shown_as: str | None = None  # the user's file: tracebacks name it; its folder is importable
    sha256: str | None = None  # of the bytes the host read: a copy that differs is not loaded
    env: dict[str, str] | None = None  # for the import (a worker started in advance)
    cwd: str | None = None
    build_cache: str | None = None  # where torch builds CUDA C++ (on a GPU)
    # The walls the worker raises before the import: {"writable": [folders], "network": bool}
    sandbox: dict[str, Any] | None = None


@dataclass(frozen=True)
class Call(ToWorker):
    """Run the version once on `inputs`."""

    TAG = "call"
    REPLY = Called
    inputs: Tensors
    poison: Poison | None = None
    return_inputs: bool = False
    trace_ops: bool = False
    trace_kernels: bool = False  # on a GPU, name every kernel the call ran (CUPTI)


@dataclass(frozen=True)
class Time(ToWorker):
    """Time the version over input sets: new ones (`inputs`), new values for those held
    (`refill`), or the same again."""

    TAG = "time"
    REPLY = Timed
    plan: dict[str, Any]  # krung.worker.timing.TimingPlan's fields
    inputs: Tensors | None = None
    refill: Tensors | None = None
    # change a few input elements before every timed call: {"leaves", "elements", "seed"}
    changes: dict[str, Any] | None = None


@dataclass(frozen=True)
class Kernels(ToWorker):
    """The kernels the version launched so far; their compiled forms written to `out_dir`."""

    TAG = "kernels"
    REPLY = KernelsListed
    out_dir: str | None = None


@dataclass(frozen=True)
class Trace(ToWorker):
    """Two calls with krung.tracer on; the second one's regions."""

    TAG = "trace"
    REPLY = Traced
    inputs: Tensors


@dataclass(frozen=True)
class Profile(ToWorker):
    """Calls inside the NVTX range a profiler watches."""

    TAG = "profile"
    REPLY = Profiled
    inputs: Tensors
    range: str
    warmup: int = 1
    calls: int = 1


# A client and the warm service.


@dataclass(frozen=True)
class Refused(Reply):
    """The service cannot do it (or does not know the request)."""

    ok = False
    why: str | None = None


@dataclass(frozen=True)
class Handed(Reply):
    """A judge's channel rides on this reply (SCM_RIGHTS)."""

    pid: int
    log: str  # its log, until the judge moves it into the run's folder
    ready: bool


@dataclass(frozen=True)
class Primed(Reply):
    pass


@dataclass(frozen=True)
class Resized(Reply):
    previous: int


@dataclass(frozen=True)
class Exited(Reply):
    status: int | None = None  # None: still running, or unknown


@dataclass(frozen=True)
class ServiceStatus(Reply):
    pid: int
    store: str
    stamp: str
    started_at: float
    pool_size: int
    idle_s: float
    idle_left_s: float
    served: int
    running: int
    pools: list[PoolStatus]


@dataclass(frozen=True)
class Stopped(Reply):
    pass


class ToService(Ask):
    FAILURE = Refused


@dataclass(frozen=True)
class Acquire(ToService):
    """A judge for an evaluation of kind `key`, handed over."""

    TAG = "acquire"
    REPLY = Handed
    key: str
    spec: JudgeSpecJson
    stamp: str  # the caller's krung code (krung.protocol.unix.code_stamp)


@dataclass(frozen=True)
class Prime(ToService):
    """Start judges of kind `key` now."""

    TAG = "prime"
    REPLY = Primed
    key: str
    spec: JudgeSpecJson
    stamp: str


@dataclass(frozen=True)
class Resize(ToService):
    """Keep `size` judges of each kind."""

    TAG = "pool"
    REPLY = Resized
    size: int


@dataclass(frozen=True)
class ExitOf(ToService):
    """The exit status of judge `pid`, waiting up to `timeout` s for it."""

    TAG = "exit"
    REPLY = Exited
    pid: int
    timeout: float = 10.0


@dataclass(frozen=True)
class StatusOf(ToService):
    TAG = "status"
    REPLY = ServiceStatus


@dataclass(frozen=True)
class Stop(ToService):
    TAG = "stop"
    REPLY = Stopped


# A client and the judge fork server (krung.judge.forks).


@dataclass(frozen=True)
class ForkJudge(Ask):
    """Fork a judge that is `python -m krung.judge ARGS` started in `cwd` with `env`, its
    output to `log`; its channel rides on the request (SCM_RIGHTS). Answered by Handed, then,
    once the judge has exited, by Exited on the same connection."""

    TAG = "fork"
    REPLY = Handed
    FAILURE = Refused
    device: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    log: str
    stamp: str  # the caller's krung code (krung.protocol.unix.code_stamp)


# The judge and the artifacts rung's build process (krung.judge.rungs.artifacts.build), which
# imports the version too: as untrusted as the worker.


@dataclass(frozen=True)
class Built(Reply):
    records: list[dict[str, Any]]  # one per kernel and specialisation, with its files


@dataclass(frozen=True)
class Build(Ask):
    """Import the version outside Triton's interpreter and compile its kernels for `arch`."""

    TAG = "build"
    REPLY = Built
    FAILURE = Failed
    version: str  # as Load's path, shown_as and sha256
    out_dir: str
    arch: str
    dsls: list[str]
    launches: list[dict[str, Any]]  # the worker's records of the version's launches
    import_paths: list[str]  # the folders the problem's format lets a version import from
    shown_as: str | None = None
    sha256: str | None = None
    # On a CPU: every case's inputs as shapes (krung.judge.rungs.artifacts.cases), for the
    # Triton backend to learn what the bench cases launch; and the entry to call with them.
    cases: list[dict[str, Any]] = field(default_factory=list)
    entry: dict[str, Any] | None = None
    # The configs @triton.autotune chose in the worker (its `autotune` records): the dry
    # run takes the same for the same key, and the first config for a key never tuned.
    autotune: list[dict[str, Any]] = field(default_factory=list)
    sandbox: dict[str, Any] | None = None  # the walls to raise before the import, as Load's


# The unions, and what decodes them.


class TaggedUnion:
    """A tagged union: the message classes of one direction of one conversation."""

    def __init__(self, name: str, *classes: type[Tagged]):
        self.name = name
        self.key = classes[0].KEY
        self.classes = {c.TAG: c for c in classes}

    def decode(self, data: object) -> Any:
        if not isinstance(data, dict):
            raise ProtocolError(f"a {self.name} message is a JSON object, not "
                                f"{type(data).__name__}")
        tag = data.get(self.key)
        cls = self.classes.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise ProtocolError(f"unknown {self.name} message {self.key}={tag!r} (krung's are "
                                f"{', '.join(self.classes)})")
        return build(cls, {k: v for k, v in data.items() if k != self.key},
                     f"{self.name} `{tag}`")


class Replies:
    """The answers to one kind of request: its reply, or the conversation's failure."""

    def __init__(self, name: str, success: type[Reply], failure: type[Reply]):
        self.name = name
        self.success, self.failure = success, failure

    def decode(self, data: object) -> Any:
        if not isinstance(data, dict):
            raise ProtocolError(f"{self.name} is a JSON object, not {type(data).__name__}")
        ok = data.get("ok")
        if not isinstance(ok, bool):
            raise ProtocolError(f"{self.name} says neither ok: true nor ok: false ({ok!r})")
        return build(self.success if ok else self.failure,
                     {k: v for k, v in data.items() if k != "ok"}, self.name)


TO_JUDGE = TaggedUnion("host-to-judge", Request)
FROM_JUDGE = TaggedUnion("judge", Ready, Env, Progress, Calibration, RungDone, ProblemFailed,
                    JudgeFailed, Done)
TO_WORKER = TaggedUnion("worker request", Load, Call, Time, Kernels, Trace, Profile)
HELLO = Replies("the worker's hello", Hello, Failed)
TO_SERVICE = TaggedUnion("service request", Acquire, Prime, Resize, ExitOf, StatusOf, Stop)
TO_BUILD = TaggedUnion("build request", Build)
TO_FORKS = TaggedUnion("judge fork request", ForkJudge)


def replies(request: Ask) -> Replies:
    """What decodes the answer to `request`."""
    return Replies(f"the reply to `{request.TAG}`", request.REPLY, request.FAILURE)


def encode(message: Message) -> dict[str, Any]:
    """The message as JSON-ready data (tensors still in place, for the channel); fields left
    at None are not sent."""
    data: dict[str, Any] = {}
    if isinstance(message, Tagged):
        data[message.KEY] = message.TAG
    if isinstance(message, Reply):
        data["ok"] = message.ok
    for f in dataclasses.fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        if value is not None:
            data[f.name] = value
    return data


def build(cls: type[Message], data: dict[str, Any], what: str) -> Any:
    """`cls` from its fields, each checked against its declared type."""
    hints = _hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ProtocolError(f"{what} has field(s) krung does not declare: {', '.join(unknown)}")
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in data  # type: ignore[arg-type]
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ProtocolError(f"{what} lacks {', '.join(missing)}")
    for name, value in data.items():
        _check(value, hints[name], f"{what}: {name}")
    return cls(**data)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The declared type of each field (or each key, for a TypedDict)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    if typing.is_typeddict(cls):  # Required[...] says which keys must be there, not their type
        return {k: typing.get_args(v)[0] if typing.get_origin(v) is Required else v
                for k, v in hints.items()}
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    names = tuple(f.name for f in dataclasses.fields(cls))
    return ("ok", *names) if issubclass(cls, Reply) else names


def _check(value: Any, hint: Any, where: str) -> None:
    wrong = _mismatch(value, hint)
    if wrong is not None:
        raise ProtocolError(f"{where} {wrong}")


def _mismatch(value: Any, hint: Any) -> str | None:
    """Why `value` is not of type `hint`, or None when it is."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return None
    if origin is Annotated:
        if TENSOR in args[1:]:
            torch = sys.modules.get("torch")  # a tensor arrived only if torch is imported
            if torch is None or not isinstance(value, torch.Tensor):
                return f"is {_shown(value)}, not a tensor"
        return _mismatch(value, args[0])
    if origin in (Union, types.UnionType):
        if any(_mismatch(value, arg) is None for arg in args):
            return None
        given = [a for a in args if a is not type(None)]
        if value is not None and len(given) == 1:  # an optional value, given: why it is wrong
            return _mismatch(value, given[0])
        return f"is {_shown(value)}, not {' or '.join(_type_name(a) for a in args)}"
    if origin is Literal:
        return None if value in args else f"is {_shown(value)}, not one of {list(args)}"
    if typing.is_typeddict(hint):
        return _record_mismatch(value, hint)
    expected = _SCALARS.get(origin or hint)
    if expected is not None:
        kinds, name = expected
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return f"is {_shown(value)}, not {name}"
        if origin is list:
            for i, item in enumerate(value):
                wrong = _mismatch(item, args[0])
                if wrong is not None:
                    return f"[{i}] {wrong}"
        if origin is dict:
            for key, item in value.items():
                wrong = "has a key that is not a string" if not isinstance(key, str) else \
                    _mismatch(item, args[1])
                if wrong is not None:
                    return f"[{key!r}] {wrong}"
        return None
    if hint is type(None):
        return None if value is None else f"is {_shown(value)}, not null"
    raise TypeError(f"krung's messages declare no values of type {hint!r}")  # a bug here


def _record_mismatch(value: Any, record: type) -> str | None:
    if not isinstance(value, dict):
        return f"is {_shown(value)}, not an object ({record.__name__})"
    hints = _hints(record)
    unknown = sorted(set(value) - set(hints))
    if unknown:
        return f"has key(s) {record.__name__} does not declare: {', '.join(map(str, unknown))}"
    missing = sorted(record.__required_keys__ - set(value))  # type: ignore[attr-defined]
    if missing:
        return f"lacks {', '.join(missing)}"
    for key, item in value.items():
        wrong = _mismatch(item, hints[key])
        if wrong is not None:
            return f"[{key!r}] {wrong}"
    return None


_SCALARS: dict[Any, tuple[tuple[type, ...], str]] = {
    str: ((str,), "a string"), int: ((int,), "an integer"), float: ((int, float), "a number"),
    bool: ((bool,), "true or false"), list: ((list,), "a list"), dict: ((dict,), "an object"),
}


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if typing.is_typeddict(hint):
        return f"an object ({hint.__name__})"
    return _SCALARS.get(typing.get_origin(hint) or hint, ((), str(hint)))[1]


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


# The JSON Schema of the messages as they travel.

UNIONS = {"to_judge": TO_JUDGE, "from_judge": FROM_JUDGE, "to_worker": TO_WORKER,
          "to_service": TO_SERVICE, "to_build": TO_BUILD, "to_forks": TO_FORKS}
ANSWERS = {"from_worker": (TO_WORKER, Hello), "from_service": (TO_SERVICE, None),
           "from_build": (TO_BUILD, None), "from_forks": (TO_FORKS, None)}  # the replies to a union's requests, and a greeting


def schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of every message as it travels: `$defs` holds each
    message and each direction of each conversation (UNIONS, ANSWERS)."""
    defs: dict[str, Any] = {
        "tensor": {"type": "object", "required": ["__tensor__", "dtype", "shape"],
                   "description": 'a tensor: {"__tensor__": <index of its raw frame>, "dtype", '
                                  '"shape", "stride", "layout", "device", "type"}, with "ipc" '
                                  'when it came by CUDA IPC instead of a frame'},
        "tensors": {"description": "a structure that may hold tensors: a tuple is "
                                   '{"__tuple__": [...]}; a dict with keys that are not '
                                   'strings is {"__items__": [[key, value], ...]}'}}
    for name, union in UNIONS.items():
        defs[name] = {"oneOf": [_ref(_message_schema(cls, defs)) for cls in
                                union.classes.values()]}
    for name, (requests, greeting) in ANSWERS.items():
        asks: list[Any] = list(requests.classes.values())
        answers = [*([greeting] if greeting else []), *dict.fromkeys(
            [*(c.REPLY for c in asks), *(c.FAILURE for c in asks)])]
        # anyOf: replies are told apart by the request they answer, not by a tag.
        defs[name] = {"anyOf": [_ref(_message_schema(cls, defs)) for cls in answers]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "krung's messages between its processes",
        "description": (__doc__ or "").split("\n\n")[0].replace("\n", " "),
        "anyOf": [_ref(name) for name in [*UNIONS, *ANSWERS]],
        "$defs": defs,
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _message_schema(cls: type[Message], defs: dict[str, Any]) -> str:
    name = cls.__name__
    if name in defs:
        return name
    properties: dict[str, Any] = {}
    required: list[str] = []
    if issubclass(cls, Tagged):
        properties[cls.KEY] = {"const": cls.TAG}
        required.append(cls.KEY)
    if issubclass(cls, Reply):
        properties["ok"] = {"const": cls.ok}
        required.append("ok")
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        properties[f.name] = _type_schema(_hints(cls)[f.name], defs)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    properties["__frames__"] = {"type": "integer", "minimum": 0,
                                "description": "how many raw tensor frames follow"}
    defs[name] = {"title": name, "description": " ".join((cls.__doc__ or name).split()),
                  "type": "object", "properties": properties, "required": required,
                  "additionalProperties": False}
    return name


def _type_schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return {}
    if origin is Annotated:
        marker = next((a for a in args[1:] if a in (TENSOR, TENSORS)), None)
        return _ref(marker) if marker else _type_schema(args[0], defs)
    if origin in (Union, types.UnionType):
        return {"anyOf": [_type_schema(a, defs) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if typing.is_typeddict(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}  # taken, in case it refers to itself
            hints = _hints(hint)
            defs[name] = {"title": name, "type": "object",
                          "properties": {k: _type_schema(v, defs) for k, v in hints.items()},
                          "required": sorted(hint.__required_keys__),
                          "additionalProperties": False}
            if hint.__doc__ and not hint.__doc__.startswith(name + "("):
                defs[name]["description"] = " ".join(hint.__doc__.split())
        return _ref(name)
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    names = {str: "string", int: "integer", float: "number", bool: "boolean",
             type(None): "null"}
    return {"type": names[hint]}

