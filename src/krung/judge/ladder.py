"""The ladder: rungs in order, each a module (or package) with a declaration `SPEC`
(krung.judge.rungs.spec.RungSpec) and `run(ctx)`.

The rungs are found, not listed: every module of krung.judge.rungs that declares one, and the
modules KRUNG_EXTRA_RUNGS names (a rung of your own, in one file on the Python path), in
their declared order. A rung returns its figures or raises RungFailed; `climb` turns either
(or any other exception) into a RungResult. A rung is skipped when a rung it needs failed or
was skipped; a needed rung that was not selected does not block it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import pkgutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from krung.judge.contract import (
    check_conduct,
    check_inputs_unchanged,
    check_outputs,
    dtype_name,
    forbidden_op_names,
)
from krung.protocol import messages, tree
from krung.protocol.errors import RungFailed, UsageError
from krung.protocol.results import INTERNAL_ERROR, RungResult, Status
from krung.worker.guard import NAN_BYTE

if TYPE_CHECKING:
    from krung.judge.candidate import Candidate
    from krung.judge.problem import Problem
    from krung.judge.rungs.spec import RungSpec
    from krung.judge.solution import Solution
    from krung.judge.verdict import Verdict
    from krung.protocol.settings import Settings

PACKAGE = "krung.judge.rungs"
# Not rungs: the declaration types.
_NOT_RUNGS = ("spec",)


def __getattr__(name: str) -> tuple[str, ...]:
    """RUNGS (every rung, in the order they run), ON_REQUEST (rungs only climbed when asked
    for: the profile, whose ncu run costs tens of seconds, and the trace, which needs an
    instrumented kernel) and DEFAULT_LADDER (what a turn of the loop climbs unless told
    otherwise: every rung that answers in seconds), from the rungs' declarations."""
    if name == "RUNGS":
        return tuple(specs())
    if name == "ON_REQUEST":
        return tuple(n for n, s in specs().items() if s.on_request)
    if name == "DEFAULT_LADDER":
        return tuple(n for n, s in specs().items() if not s.on_request)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def specs() -> dict[str, RungSpec]:
    """Every rung's declaration, in ladder order."""
    return {name: module.SPEC for name, module in _rungs().items()}


def rung_module(name: str) -> ModuleType:
    """The module (or package) of a rung: its `SPEC` and `run(ctx)`."""
    try:
        return _rungs()[name]
    except KeyError:
        raise UsageError(f"unknown rung: {name}", hint=f"choose from: {','.join(_rungs())}") \
            from None


@functools.cache
def _rungs() -> dict[str, ModuleType]:
    from krung.protocol.settings import Settings

    return discover(Settings.from_env().extra_rungs)


def discover(extra: str = "") -> dict[str, ModuleType]:
    """The rung modules by name, in declared order: the modules of krung.judge.rungs, and
    those `extra` names (comma-separated, as KRUNG_EXTRA_RUNGS gives them)."""
    package = importlib.import_module(PACKAGE)
    modules = [_declared(importlib.import_module(f"{PACKAGE}.{info.name}"), own=True)
               for info in pkgutil.iter_modules(package.__path__)
               if info.name not in _NOT_RUNGS]
    modules += [_declared(_import_extra(name)) for name in extra.split(",") if name.strip()]
    rungs: dict[str, ModuleType] = {}
    for module in sorted(modules, key=lambda m: m.SPEC.order):
        name = module.SPEC.name
        if name in rungs:
            raise UsageError(f"two modules declare the rung {name}: {rungs[name].__name__} "
                             f"and {module.__name__}", hint="give your rung another name")
        rungs[name] = module
    for name, module in rungs.items():
        unknown = [n for n in module.SPEC.needs if n not in rungs]
        if unknown:
            raise UsageError(f"the rung {name} ({module.__name__}) needs unknown rung(s) "
                             f"{', '.join(unknown)}", hint=f"the rungs are: {', '.join(rungs)}")
    return rungs


def _import_extra(name: str) -> ModuleType:
    try:
        return importlib.import_module(name.strip())
    except ImportError as exc:
        raise UsageError(f"KRUNG_EXTRA_RUNGS names {name.strip()}, which does not import: "
                         f"{type(exc).__name__}: {exc}",
                         hint="put the folder that holds it on PYTHONPATH (the judge process "
                              "imports it too), or correct the name") from None


def _declared(module: ModuleType, own: bool = False) -> ModuleType:
    """`module`, checked to be a rung: a SPEC (named after the module, for krung's own) and a
    run(ctx)."""
    from krung.judge.rungs.spec import RungSpec

    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, RungSpec) or not callable(getattr(module, "run", None)):
        raise UsageError(f"{module.__name__} is no rung: it needs `SPEC = RungSpec(...)` and "
                         "`def run(ctx)`", hint="see docs/rungs.md, `A rung of your own`")
    if own and spec.name != module.__name__.rsplit(".", 1)[-1]:
        raise UsageError(f"{module.__name__} declares the rung {spec.name}",
                         hint="a rung of krung.judge.rungs is named after its module")
    return module


class RungSkipped(Exception):
    """Raised by a rung that cannot run here (e.g. no GPU for the profiler)."""


def select(spec: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """The rungs to climb, in ladder order: the default ladder for nothing; exactly the rungs
    named in `a,b` (or a list); the default ladder and more for `+a,+b` (`+profile` adds the
    profile to the default)."""
    declared = specs()
    default = [n for n, s in declared.items() if not s.on_request]
    names = [] if spec is None else [n.strip() for n in spec.split(",")] \
        if isinstance(spec, str) else [str(n).strip() for n in spec]
    names = [n for n in names if n]
    if not names:
        return default
    added = [n.removeprefix("+") for n in names if n.startswith("+")]
    if added and len(added) != len(names):
        raise UsageError(f"rungs {','.join(names)} mix added rungs (+name) with named ones",
                         hint="either name every rung to climb (static,compile,run) or add "
                              "rungs to the default ladder (+profile,+trace)")
    unknown = [n for n in (added or names) if n not in declared]
    if unknown:
        raise UsageError(f"unknown rung(s): {', '.join(unknown)}",
                         hint=f"choose from: {','.join(declared)}; +name adds a rung to the "
                              f"default ladder ({','.join(default)})")
    chosen = set(default) | set(added) if added else set(names)
    return [n for n in declared if n in chosen]


@dataclass
class Context:
    """What every rung can use. Lives in the judge process."""

    problem: Problem
    solution: Solution
    device: str
    candidate: Candidate
    settings: Settings
    seed: int
    run_dir: Path
    results: dict[str, RungResult] = field(default_factory=dict)
    progress: Callable[[str, str], None] = lambda rung, message: None
    loaded: bool = False
    env: dict[str, Any] = field(default_factory=dict)  # device facts (judge.environment)
    # The device ceilings kept in the store (krung.judge.rungs.roofline.calibration), and how to keep a new one:
    # the store belongs to the caller, so a calibration made here is sent there.
    calibrations: list[dict[str, Any]] = field(default_factory=list)
    save_calibration: Callable[[dict[str, Any]], None] = lambda entry: None
    # Per output, the reference's own spread by rounding once a failing call showed it
    # (krung.judge.spread): every later judgement allows it. [] once looked and none seen.
    reference_spread: list[float] | None = None

    def seed_for(self, purpose: str, *parts: Any) -> int:
        """A case seed derived from the evaluation's secret seed: fresh for every run."""
        return derive_seed(self.seed, purpose, *parts)

    def make_inputs(self, case: dict, seed: int) -> tuple:
        return tuple(self.problem.make_inputs(dict(case), seed, self.device))

    def release_cache(self) -> None:
        """On a GPU, hand back to the driver what torch's allocator keeps of the cases before
        this one: blocks of another case's sizes are not reused, yet they count beside it (a
        judge held 7.8 copies of a 512 MiB input at its peak, half of them such blocks)."""
        if self.device != "cpu":
            import torch

            torch.cuda.empty_cache()

    def expected(self, inputs: tuple) -> list:
        """The reference's outputs, on copies so the reference cannot alter the inputs."""
        result = self.problem.reference(*tree.clone(inputs))
        return list(result) if isinstance(result, (tuple, list)) else [result]

    def load(self) -> messages.Loaded:
        """Import the version in the worker (once); raise RungFailed if that fails."""
        what = "the import of the version"
        reply = self.candidate.request(self.load_message(), self.settings.compile_timeout_s,
                                       what, limit="--compile-timeout")
        if isinstance(reply, messages.Failed):
            raise failure(reply.error, what)
        self.loaded = True
        return reply

    def load_message(self) -> messages.Load:
        """The `load` request for any worker of this version (the ladder's own, or a fresh
        one under ncu or compute-sanitizer): its file, the problem's entry and import paths,
        and on a GPU the build cache torch builds CUDA C++ in."""
        cache = None
        if self.device != "cpu" and self.solution.dsl == "cuda":
            from krung.protocol import build_cache  # torch builds CUDA C++ in a cache by the store

            cache = str(build_cache.root_for(self.run_dir))
        return messages.Load(path=str(self.solution.copy or self.solution.path),
                             shown_as=str(self.solution.path), sha256=self.solution.sha256,
                             entry=self.problem.entry, build_cache=cache)

    def ask(self, message: messages.ToWorker, what: str, timeout: float,
            max_tensor_bytes: int | None = None) -> Any:
        """One request to the worker, with the version loaded: its reply (a messages.Reply);
        RungFailed if it fails."""
        if not self.loaded:
            self.load()
        reply = self.candidate.request(message, timeout, what, max_tensor_bytes)
        if isinstance(reply, messages.Failed):
            raise failure(reply.error, what)
        return reply

    @property
    def traces_ops(self) -> bool:
        """Whether traced calls record the torch operators they run: where the problem's
        policy forbids some, or asks for the version's own kernel (docs/trust.md)."""
        return bool(self.problem.forbid_ops) or self.problem.require_own_kernel

    def check_contract(self, reply: dict[str, Any], expected: list, what: str) -> None:
        """The outputs' contract (krung.judge.contract), the same in every rung: where the
        problem's own check decides what it accepts (GPU MODE's), dtype and shape are its
        call, in the timed calls as in the checked ones."""
        check_outputs(reply, expected, self.device, what,
                      exact=not self.problem.check_decides_outputs)

    def judge(self, inputs: tuple, outputs: list, expected: list,
              returned_tuple: bool) -> Verdict:
        """The verdict on one call's outputs (krung.judge.verdict), the same in every rung:
        with the reference's own spread by rounding allowed, once a failing call showed it
        (krung.judge.spread)."""
        from krung.judge.spread import spread_seen
        from krung.judge.verdict import judge_outputs

        verdict = judge_outputs(self.problem, inputs, outputs, expected, returned_tuple,
                                self.device, self.reference_spread)
        if not verdict.passed and spread_seen(self, inputs, expected, verdict):
            verdict = judge_outputs(self.problem, inputs, outputs, expected, returned_tuple,
                                    self.device, self.reference_spread)
        return verdict

    def checked_call(self, inputs: tuple, expected: list, what: str, *,
                     poison_byte: int = NAN_BYTE, trace: bool = False) -> messages.Called:
        """Run the version once under the call contract (krung.judge.contract): the memory its
        outputs will likely get is poisoned first (and so are output buffers passed among
        its inputs); its outputs, its inputs afterwards and its conduct are checked; a reply
        far larger than the outputs is refused unread."""
        writable = self.problem.writable_leaves(inputs)
        message = messages.Call(
            inputs=list(poison_leaves(inputs, writable, poison_byte)),
            poison={"byte": poison_byte, "specs": [
                {"shape": list(e.shape), "dtype": dtype_name(e)} for e in expected]},
            return_inputs=not self.problem.inplace,
            trace_ops=trace and self.traces_ops,
            trace_kernels=trace and self.device != "cpu" and self.settings.kernel_census)
        limit = 2 * (nbytes(inputs) + nbytes(expected)) + (1 << 20)
        reply = self.ask(message, what, self.settings.call_timeout_s, limit)
        check_conduct(reply, what, forbidden_op_names(self.problem.forbid_ops))
        self.check_contract(reply, expected, what)
        if reply.inputs_after is not None:
            check_inputs_unchanged(reply.inputs_after, inputs, what, writable)
            # checked: not held beside the outputs while the caller compares them
            reply = dataclasses.replace(reply, inputs_after=None)
        return reply


def derive_seed(secret: int, purpose: str, *parts: Any) -> int:
    """A seed for one purpose, derived from the evaluation's secret seed."""
    text = "/".join(str(p) for p in (secret, purpose, *parts))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def poison_leaves(inputs: tuple, writable: set[int], byte: int) -> tuple:
    """A copy of `inputs` whose output buffers (the writable leaves) are filled with `byte`,
    so an element the version does not write shows; the other tensors are shared."""
    if not writable:
        return inputs

    def fill(index: int, tensor: Any) -> Any:
        if index not in writable:
            return tensor
        import torch

        poisoned = torch.empty_like(tensor)
        poisoned.untyped_storage().fill_(byte)
        return poisoned

    return tree.map_leaves(fill, inputs)


def nbytes(value: Any) -> int:
    return tree.nbytes(value)


def failure(error: dict[str, Any], what: str) -> RungFailed:
    """A worker's error record as a RungFailed."""
    return RungFailed(error.get("type", "Error"), f"{error.get('message', '')} (in {what})",
                      error.get("hint"), location=error.get("location"),
                      details=error.get("details"))


def climb(ctx: Context, names: list[str], emit: Callable[[RungResult], None],
          starting: Callable[[str], None] = lambda name: None) -> None:
    """Run the rungs in order, telling `starting` each one's name first. On a GPU the rungs
    that measure wait for the GPU to themselves (krung.judge.gpu_lock); the wait is not in
    their duration."""
    from krung.judge import gpu_lock

    for name in names:
        starting(name)
        module = rung_module(name)
        blocked = [need for need in module.SPEC.needs
                   if need in ctx.results and not ctx.results[need].ok]
        if blocked:
            need = blocked[0]
            state = ctx.results[need].status.value
            # The root cause once, on the rungs right after the rung that could not run.
            why = ctx.results[need].reason if state == "skipped" else None
            if why and why.startswith("needs "):
                why = None
            result = RungResult(name, Status.SKIPPED, reason=f"needs {need}, which {state}"
                                + (f" ({why})" if why else ""))
        elif ctx.device == "cuda" and module.SPEC.exclusive_gpu:
            with gpu_lock.exclusive(gpu_lock.lock_path(ctx.env), functools.partial(
                    ctx.progress, name, "waiting for the GPU (another evaluation is measuring "
                                        "on it)")):
                result = run_rung(name, module.run, ctx)
        else:
            result = run_rung(name, module.run, ctx)
        ctx.results[name] = result
        emit(result)


def run_rung(name: str, fn: Callable[[Context], dict[str, Any]], ctx: Context) -> RungResult:
    start = time.perf_counter()
    # What the rungs before left in torch's cache, handed back: at declared sizes the run
    # rung's dead blocks (about six copies of an input) counted beside correctness's first
    # draws, most of a 65 GB judge peak for a 6 GiB input.
    ctx.release_cache()
    try:
        figures = fn(ctx)
        result = RungResult(name, Status.OK, figures=figures)
    except RungSkipped as skip:
        result = RungResult(name, Status.SKIPPED, reason=str(skip))
    except RungFailed as failed:
        # A type the version named (its own exception class): never krung's own failure's
        kind = (f"{INTERNAL_ERROR} (the version's)" if failed.error_type == INTERNAL_ERROR
                else failed.error_type)
        result = RungResult(name, Status.FAILED, figures=failed.figures,
                            error=f"{kind}: {failed.message}",
                            error_type=kind, hint=failed.hint,
                            location=failed.location, details=failed.details)
    except Exception as exc:  # krung's or the problem's own fault, not the version's
        result = RungResult(
            name, Status.FAILED, error=f"{type(exc).__name__}: {exc}", error_type=INTERNAL_ERROR,
            hint="this error comes from krung or from the problem's code, not from the version",
            details=getattr(exc, "details", None) or traceback.format_exc())
    result.duration_s = time.perf_counter() - start
    return result
