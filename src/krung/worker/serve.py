"""The candidate worker: the only process that imports a version.

Started by the judge as `python -m krung.worker.serve --fd N --device D`. It answers requests on
its private channel: `load` imports the version and takes its entry point (the request's
`entry`, see entries.py: a function such as `kernel`, or a KernelBench `ModelNew` built and
loaded with the reference's weights), `call` runs it once on the inputs it is sent, `time`
times it. Inputs are tuples of tensors or of nested structures holding tensors (tree.py). Whatever the version raises comes back explained (explain.py); if it
crashes the process, the judge sees the channel close and reports how it died.

Imports stay lean (stdlib, torch; triton only through the version) so it starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import functools
import hashlib
import importlib
import importlib.util
import json
import linecache
import os
import re
import resource
import signal
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from krung.protocol import messages
from krung.protocol.channel import Channel, ChannelClosed, tensor_spec
from krung.protocol.tree import leaves, map_tensors

if TYPE_CHECKING:
    from krung.worker.library_calls import LibraryWatch


class Worker:
    def __init__(self, channel: Channel, device: str, preloaded: tuple[str, ...] = (),
                 private: str | None = "not asked for"):
        # What the worker runs after the version's import, loaded before it: the sentinels
        # watch what is loaded when they are bound.
        from krung.worker import launches, timing  # noqa: F401
        from krung.worker.guard import PlainOutputs, Sentinels, VersionThread, python_threads

        if device != "cpu":
            from krung.protocol import cuda_driver, cuda_ipc  # noqa: F401
        # Work handed to numpy or a library through ctypes (CPU only until the GPU gate).
        self.libraries: LibraryWatch | None = None
        if device == "cpu":
            from krung.worker.library_calls import LibraryWatch

            self.libraries = LibraryWatch()
            self.libraries.install()
        self.channel = channel
        self.device = device
        self.preloaded = preloaded  # DSL packages imported before the version (warm start)
        self.private = private  # None once in a mount namespace of its own, else why not
        self.sandbox: dict[str, Any] = {}  # what applied at load (the walls, what is hidden)
        self.site = VersionThread()  # where the version's code runs, import and calls alike
        self.plain = PlainOutputs()  # how outputs are checked and copied, bound now
        # The timing and its figures, bound now: a patch the version undoes before the
        # sentinels look does not reach them.
        self.measure, self.to_json = timing.measure, timing.Samples.to_json
        self.sentinels = Sentinels(self._watched())  # before any version code runs
        self.own_kernels: dict[int, str] = {}  # the version's own Triton kernels
        self.threads_before = python_threads()
        self.kernel: Any = None
        self.solution: Path | None = None
        self.time_sets: list[list[Any]] = []  # input sets on the device, kept between `time`s

    def _watched(self) -> dict[str, Any]:
        """The worker's own objects a version must not change (krung.worker.guard.Sentinels)."""
        return {"Worker": self, "Channel": self.channel, "Connection": self.channel._conn,
                "VersionThread": self.site, "PlainOutputs": self.plain}

    def serve(self) -> None:
        while True:
            try:
                data = self.channel.recv(into=self._where_tensors_land)
            except ChannelClosed:
                return
            except Exception as exc:  # the inputs cannot be placed: no memory, a broken context
                self.refuse(exc)
                return
            try:
                request = messages.TO_WORKER.decode(data)
            except messages.ProtocolError as exc:  # the judge's bug: say so, serve on
                self.channel.send(messages.Failed({"type": "ProtocolError", "kind": "internal",
                                                   "message": str(exc)}))
                continue
            handler = getattr(self, f"op_{request.TAG}")
            try:
                reply = handler(request)
            except BaseException as exc:  # SystemExit and KeyboardInterrupt too: report them
                stage = "load" if isinstance(request, messages.Load) else "call"
                reply = messages.Failed(self.explain(exc, stage),
                                        sandbox=self.sandbox if stage == "load" else None)
            self.channel.send(reply)
            # Dropped before the next request arrives: at declared sizes this request's inputs
            # and outputs (GiB each) would otherwise be held beside the next one's. What the
            # reply shares in place, the channel holds until the judge answers.
            data = request = reply = None

    def _where_tensors_land(self, header: dict[str, Any]) -> dict[str, Any]:
        """A `time` request's new values (`refill`) go straight into the input sets held;
        any other request ends those sets before its own tensors arrive (the next bench
        case's, a later rung's): at declared sizes two sets side by side would not fit."""
        if header.get(messages.ToWorker.KEY) == messages.Time.TAG and "refill" in header:
            return {"refill": self.time_sets}
        self.time_sets = []
        return {}

    def refuse(self, exc: Exception) -> None:
        """Say why this request cannot be taken, then end at once: the rest of the message
        may be unread, so the channel is done, and nothing the version left running (a
        thread, an atexit hook) may keep the judge waiting on it."""
        text = str(exc)
        if "ILLEGAL_ADDRESS" in text:  # CUDA errors are sticky: the previous call broke it
            cause = "an illegal memory access by the version's previous call broke the CUDA context; "
            hint = "fix the version's illegal memory access first"
        else:
            cause = ""
            hint = ("the request's inputs did not fit in the memory left (beside another "
                    "evaluation on the GPU, or what the version keeps between calls): run it "
                    "alone, or keep less" if re.search(r"out of memory|allocate", text, re.I)
                    else "an earlier error in the version may have broken the CUDA context: "
                         "fix that one first")
        with contextlib.suppress(ChannelClosed):
            self.channel.send(messages.Failed({
                "type": type(exc).__name__, "kind": "intake",
                "message": f"{cause}the worker could not take the request: {text}",
                "hint": hint}))
        self.channel.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def explain(self, exc: BaseException, stage: str) -> Any:
        from krung.worker.explain import explain

        return explain(exc, self.solution or Path("?"), stage)

    def op_load(self, request: messages.Load) -> messages.Reply:
        from krung.worker.entries import DEFAULT_ENTRY, EntryError, resolve

        self.solution = Path(request.shown_as or request.path).resolve()
        entry = request.entry or DEFAULT_ENTRY
        start = time.perf_counter()
        # What this evaluation sets for the import (a worker started in advance has not seen it).
        os.environ.update(request.env or {})
        if request.cwd:
            move_to(request.cwd)
        # Files the problem's format lets a version import (GPU MODE's task.py, utils.py).
        sys.path.extend(p for p in entry.get("import_paths", []) if p not in sys.path)
        if request.build_cache:  # CUDA C++ on a GPU: torch builds in krung's cache
            from krung.worker import torch_build

            torch_build.install(request.build_cache, self.solution)
        # torch is in; the version not yet. Landlock binds the thread that asks (and what it
        # starts later): the version's thread, where its code runs, and this one, where signal
        # handlers it installs would run.
        hidden = hide_store(request.sandbox, self.private)  # before the walls forbid mounts
        sandbox = {**self.site.run(raise_walls, (request.sandbox,)), **hidden}
        raise_walls(request.sandbox)
        self.sandbox = sandbox
        before = set(sys.modules)
        if "krung_version" not in sys.modules:  # no version ran here: bind all that is loaded
            from krung.worker.guard import Sentinels

            self.sentinels = Sentinels(self._watched())
        try:
            module = self.site.run(import_version, (Path(request.path), self.solution,
                                                    request.sha256))
        except messages.VersionChanged as exc:
            return messages.Failed({"type": "VersionChanged", "kind": "load", "message": str(exc),
                                    "hint": "something rewrote the run's folder during the "
                                            "run: evaluate the version again"})
        uses_triton = "triton" in sys.modules and (
            "triton" not in self.preloaded
            or _refers_to("triton", [module, *(sys.modules[m] for m in set(sys.modules) - before)]))
        if uses_triton:
            from krung.worker.guard import own_triton_kernels

            prepare_triton(self.device)
            self.own_kernels = own_triton_kernels(module)
        if "tilelang" in sys.modules:  # and every TileLang kernel called
            from krung.worker import tilelang_kernels

            tilelang_kernels.install()
        from krung.worker.guard import watch_extensions

        watch_extensions(module)
        try:
            self.kernel = self.site.run(resolve, (module, entry, self.device))
        except EntryError as exc:
            return messages.Failed({
                "type": exc.error_type, "kind": "load", "location": str(self.solution),
                "message": f"{self.solution.name}: {exc.message}", "hint": exc.hint})
        triton = sys.modules.get("triton") if uses_triton else None
        return messages.Loaded(load_s=time.perf_counter() - start,
                               triton=getattr(triton, "__version__", None), builds=_builds(),
                               sandbox=sandbox)

    def op_call(self, request: messages.Call) -> messages.Reply:
        """Run the version once. Optionally: poison the memory its outputs will likely get,
        trace the torch operators it runs, and send back its inputs as they are after it."""
        from krung.worker.guard import OpTrace, OwnKernels, call_record, perturbed, poison

        inputs = self.to_device(request.inputs)
        poisoned: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if request.poison:
            poison(request.poison["specs"], request.poison["byte"], self.device)
            if self.device == "cpu":
                poisoned = perturbed(request.poison["byte"])
        self.synchronize()
        trace = OpTrace(lean=self.device == "cpu") if request.trace_ops else None
        call_record(self.own_kernels)  # what earlier requests left in the launch log
        # Left after the outputs' copy: the profiler's end synchronises the device.
        own = OwnKernels(device=request.trace_kernels and self.device != "cpu")
        start = time.perf_counter()
        if self.libraries:
            self.libraries.start()
        with own:
            try:
                with poisoned:  # the trace is entered in the version's thread: torch keeps it per thread
                    result = self.site.run(self.kernel, inputs, trace and trace.__enter__,
                                           trace and functools.partial(trace.__exit__, None,
                                                                       None, None))
            finally:
                library = self.libraries.take() if self.libraries else None
            outputs = _outputs(result, self.device, self.plain)
            self.synchronize()
        call_s = time.perf_counter() - start
        if isinstance(outputs, messages.Failed):
            return dataclasses.replace(outputs, builds=_builds())
        return messages.Called(
            **outputs, call_s=call_s, builds=_builds(), **self.conduct(),
            **call_record(self.own_kernels),
            ops=sorted(trace.ops) if isinstance(trace, OpTrace) else None,
            kernels=own.names, device_kernels=own.device_names,
            device_kernel_ns=own.device_ns, library=library,
            inputs_after=inputs if request.return_inputs else None)

    def op_time(self, request: messages.Time) -> messages.Reply:
        """Time the version over input sets, and send back each set's last output so the
        judge can check what the timed calls computed.

        `inputs` gives new sets (new storage); `refill` gives new values for the sets held
        from the previous request, copied into the same storage; neither: the same sets."""
        from krung.worker.timing import TimingPlan

        if request.inputs is not None:
            self.time_sets = [self.to_device(s) for s in request.inputs]
        if request.refill is not None:
            for held, values in zip(self.time_sets, request.refill, strict=True):
                for tensor, value in zip(leaves(held), leaves(values), strict=True):
                    if value is not tensor:  # not received into it (krung.protocol.channel)
                        tensor.copy_(value)
        sets = self.time_sets
        tuned = self.autotune_before_timing(sets) if request.inputs is not None else []
        call = _TimedCall(self.site, self.kernel, sets, self.plain)

        changes = None
        if request.changes:  # a few elements change before every timed call
            from krung.worker.guard import InputChanges

            changes = InputChanges(sets, **request.changes)
        samples = self.measure(call, len(sets), self.device, TimingPlan(**request.plan),
                               _before_each(call, changes, len(sets)))
        call.settle()
        each = [_outputs(result, self.device, self.plain) for result in call.outputs]
        self.synchronize()
        failed = next((o for o in each if isinstance(o, messages.Failed)), None)
        if failed:
            return failed
        return messages.Timed(
            samples=self.to_json(samples), outputs=[o["outputs"] for o in each],  # type: ignore[index]
            specs=[o["specs"] for o in each], tuple=each[0]["tuple"],  # type: ignore[index]
            autotune=tuned or None, changed=changes.report() if changes else None,
            outputs_reused=call.shared, **self.conduct())

    def autotune_before_timing(self, sets: list[list[Any]]) -> list[dict[str, Any]]:
        """Where the version has @triton.autotune kernels, call it once per input set before
        anything is timed, so every config choice for these shapes (the autotuner's own
        benchmarking, with its many launches) is made outside the timed calls; return the
        configs those calls used."""
        from krung.worker import launches

        log = launches.current()
        if log is None or not log.autotune:
            return []
        log.recent.clear()
        log.recording = True
        try:
            for inputs in sets:
                self.site.run(self.kernel, inputs)
            self.synchronize()
        finally:
            log.recording = False
        chosen = {json.dumps([r["kernel"], r["key"], r["dtypes"]], default=str): r
                  for r in log.recent}
        return list(chosen.values())

    def op_kernels(self, request: messages.Kernels) -> messages.KernelsListed:
        """The Triton kernels the version launched so far: under the interpreter, how each
        launch was specialised; on a GPU, what each compiled to, written to `out_dir`. On a
        GPU also TileLang's kernels, their CUDA source and what it compiles to."""
        from krung.worker import launches

        out_dir = Path(request.out_dir) if request.out_dir else None
        compiled = []
        if out_dir is not None and "tilelang" in sys.modules:
            from krung.worker import tilelang_kernels

            compiled += tilelang_kernels.dump(out_dir)
        log = launches.current()
        if log is None:
            return messages.KernelsListed(launches=[], compiled=compiled)
        if out_dir is not None and log.compiled:
            compiled += launches.dump_compiled(log, out_dir)
        return messages.KernelsListed(launches=list(log.described.values()), compiled=compiled,
                                      autotune=list(log.autotune.values()))

    def op_trace(self, request: messages.Trace) -> messages.Traced:
        """Run the version twice with krung.tracer on (the first call compiles the traced
        kernels) and send back the second call's region records and its event time."""
        import torch

        from krung import tracer

        inputs = self.to_device(request.inputs)
        tracer.begin(self.device)
        self.site.run(self.kernel, inputs)
        self.synchronize()
        tracer.begin(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.site.run(self.kernel, inputs, start.record, end.record)
        self.synchronize()
        return messages.Traced(launches=tracer.end(), call_us=start.elapsed_time(end) * 1e3)

    def op_profile(self, request: messages.Profile) -> messages.Profiled:
        """Calls for a profiler to watch: warm-up calls outside, then `calls` calls inside
        the NVTX range the profiler is told to include (krung.judge.rungs.profile.ncu.NVTX_RANGE)."""
        import torch

        inputs = self.to_device(request.inputs)
        for _ in range(request.warmup):
            self.site.run(self.kernel, inputs)
        self.synchronize()
        for _ in range(request.calls):  # NVTX ranges are per thread: pushed in the version's
            self.site.run(self.kernel, inputs,
                          functools.partial(torch.cuda.nvtx.range_push, request.range),
                          torch.cuda.nvtx.range_pop)
        self.synchronize()
        return messages.Profiled()

    def conduct(self) -> dict[str, Any]:
        """What the judge should know about the version's conduct besides its outputs."""
        from krung.worker.guard import python_threads

        conduct = {"tampered": self.sentinels.tampered(),
                   "threads_started": len(python_threads() - self.threads_before),
                   "host_peak_mib": host_peak_mib()}
        if self.device != "cpu":  # what a problem at declared sizes needs of the GPU
            import torch

            conduct["device_peak_mib"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
        return conduct

    def to_device(self, inputs: list[Any]) -> list[Any]:
        if self.device == "cpu":
            return inputs
        return map_tensors(lambda t: t.to(self.device), inputs)

    def synchronize(self) -> None:
        if self.device != "cpu":
            import torch

            torch.cuda.synchronize()


class _TimedCall:
    """`call(i)` for krung.worker.timing.measure: the version on input set i, in its thread;
    `around(i, start, end)` runs the timer's `start` and `end` there, next to the call.

    `outputs[i]` is set i's last output, for the judge to check. Where the calls' outputs
    share storage across sets (a CUDA graph's static output: torch.compile's
    mode="reduce-overhead"), the next set's call overwrites it: then `settle`, run before
    every call outside the timed region, copies the last call's outputs first, as the
    checked calls' outputs are copied (`shared` says so)."""

    def __init__(self, site: Any, kernel: Any, sets: list[list[Any]], plain: Any):
        self.site, self.kernel, self.sets, self.plain = site, kernel, sets, plain
        self.outputs: list[Any] = [None] * len(sets)
        self.addresses: list[set[int]] = [set() for _ in sets]  # read while fresh
        self.last: int | None = None
        self.shared = False

    def __call__(self, i: int) -> None:
        self.outputs[i] = self.site.run(self.kernel, self.sets[i])
        self.last = i

    def around(self, i: int, start: Any, end: Any) -> None:
        self.outputs[i] = self.site.run(self.kernel, self.sets[i], start, end)
        self.last = i

    def settle(self) -> None:
        """The last call's outputs made safe from the next call: their addresses noted, and
        copied (on the stream, no wait) once the sets' outputs are seen to share storage."""
        i, self.last = self.last, None
        if i is None:
            return
        tensors = self.plain.tensors(self.outputs[i])
        self.addresses[i] = {self.plain.address(t) for t in tensors} - {0}
        self.shared = self.shared or any(self.addresses[i] & self.addresses[n]
                                         for n in range(len(self.sets)) if n != i)
        if self.shared and len(tensors) == len(self.plain.listed(self.outputs[i])):
            copies = [self.plain.copy(t) for t in tensors]
            self.outputs[i] = tuple(copies) if self.plain.is_sequence(self.outputs[i]) \
                else copies[0]


def _before_each(call: _TimedCall, changes: Any, sets: int) -> Any:
    """What runs ahead of each timed call, outside its time: the last call's outputs made
    safe from this one (where sets rotate), then the input changes; None where neither."""
    if sets < 2:  # one set: its last output is the last call's, never overwritten
        return changes.before if changes else None

    def before(i: int) -> None:
        call.settle()
        if changes:
            changes.before(i)

    return before


def _outputs(result: Any, device: str, plain: Any) -> dict[str, Any] | messages.Failed:
    """A version's return value as a reply's `outputs`, `specs` and `tuple`, or what is wrong.

    Each output is taken as it is: a plain torch.Tensor with nothing set on it, copied with
    functions bound before the version was imported (krung.worker.guard.PlainOutputs), so
    no code of the version's runs in the copy, outside the calls' trace and time. On a GPU
    the outputs are copied on the current stream before anyone synchronises the device, so
    work the version left running on another stream, unjoined, is not waited for: its
    unfinished output shows as wrong, as it would to a caller of the kernel."""
    import torch

    outputs = plain.items(result) if plain.is_sequence(result) else [result]
    problems = [p for p in (plain.problem(i, o) for i, o in enumerate(outputs)) if p]
    if problems:
        return messages.Failed({
            "type": "OutputType", "kind": "runtime", "message": problems[0],
            "hint": "return dense torch.Tensor outputs (or a tuple of them) that hold their "
                    "values when returned, as the reference does: no tensor subclass, no "
                    "attributes or methods set on the tensor, no lazy or deferred result"})
    specs = [tensor_spec(o) for o in outputs]
    outputs = [plain.copy(o) for o in outputs]
    if device != "cpu":
        torch.cuda.current_stream().synchronize()
    return {"outputs": outputs, "specs": specs, "tuple": plain.is_sequence(result)}


def host_peak_mib() -> float:
    """This process's peak resident memory (Linux counts ru_maxrss in KiB)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _builds() -> list[dict[str, Any]] | None:
    """The CUDA C++ builds torch ran since the last reply (krung.worker.torch_build), if any."""
    torch_build = sys.modules.get("krung.worker.torch_build")
    return (torch_build.builds() if torch_build is not None else None) or None


def warm_up(device: str, packages: list[str]) -> tuple[str, ...]:
    """A worker started ahead of its version (the warm service) does now what the version's
    first load and checked call would otherwise pay for: import the DSL packages that are
    installed, fix Triton's interpreter (krung.worker.interpreter; ml_dtypes alone takes a
    second), and enter the operator trace once (on a GPU its first use imports Dynamo:
    seconds; on a CPU the trace is lean, krung.worker.guard.OpTrace). Returns the packages imported. Launches are noted only for a version
    that uses Triton (op_load), as in a worker started cold."""
    import torch

    from krung.worker.guard import OpTrace

    preloaded = tuple(p for p in packages if importlib.util.find_spec(p) is not None)
    for package in preloaded:  # after resolve_device: Triton reads TRITON_INTERPRET at import
        importlib.import_module(package)
    if "triton" in preloaded and device == "cpu":
        from krung.worker.interpreter import bfloat16_dtype, fix_interpreter

        fix_interpreter()
        bfloat16_dtype()  # a cold worker loads ml_dtypes at a kernel's first bfloat16 only
    with OpTrace(lean=device == "cpu"):
        torch.ones(2).add(1)
    return preloaded


def prepare_triton(device: str) -> None:
    """Under the interpreter, fix its bfloat16 and its autotuner (krung.worker.interpreter);
    everywhere, note every kernel launch, for the artifacts rung. Once per process."""
    if device == "cpu":
        from krung.worker.interpreter import fix_interpreter

        fix_interpreter()
    from krung.worker.launches import install

    install()


def _refers_to(package: str, modules: list[Any]) -> bool:
    """Whether any of `modules` (not the package's own) holds the package, one of its modules,
    or something it defines (a @triton.jit kernel): how a worker that imported the package in
    advance tells whether the version uses it."""
    def of_package(name: Any) -> bool:
        return isinstance(name, str) and name.split(".")[0] == package

    for module in modules:
        if of_package(getattr(module, "__name__", None)):
            continue
        for value in list(vars(module).values()):
            try:
                if isinstance(value, ModuleType):
                    if of_package(value.__name__):
                        return True
                elif of_package(getattr(value, "__module__", None)) or of_package(
                        type(value).__module__):
                    return True
            except Exception:  # an object whose attributes raise: it tells nothing
                continue
    return False


def raise_walls(asked: dict[str, Any] | None) -> dict[str, Any]:
    """The sandbox the judge asked for (krung.worker.guard.restrict); what applied. Where
    Landlock is missing or refuses, the version runs without it, and the run says so."""
    from krung.worker.guard import restrict

    if not asked:
        return {"sandbox": "none", "why": "not asked for (KRUNG_SANDBOX: on a GPU only when on)"}
    try:
        return restrict(asked["writable"], network=asked.get("network", False))
    except OSError as exc:
        return {"sandbox": "none", "why": str(exc)}


def hide_store(asked: dict[str, Any] | None, private: str | None) -> dict[str, Any]:
    """Hide what the judge names of the store (other runs' folders, the database) in the
    worker's own mount namespace; what applied, for the run's `env.sandbox`."""
    if not asked or not asked.get("hidden"):
        return {}
    if private is not None:
        return {"store": f"readable: no mount namespace of its own ({private})"}
    from krung.worker.guard import hide

    try:
        return {"hidden": hide(asked["hidden"], asked.get("keep", []))}
    except OSError as exc:
        return {"store": f"readable: {exc}"}


def move_to(cwd: str) -> None:
    """Work in `cwd`, as a process started there would: its path entry (`python -m` puts the
    start directory first on sys.path) follows."""
    here = os.getcwd()
    os.chdir(cwd)
    if sys.path and sys.path[0] == here:
        sys.path[0] = os.getcwd()


def import_version(path: Path, shown_as: Path | None = None, sha256: str | None = None) -> Any:
    """Import the version from `path` (the run's copy of the bytes the host read, checked
    against their `sha256`) as the file `shown_as` (the user's): tracebacks, inspect and
    the DSLs that read a kernel's source (Triton) see that name with the copy's lines, and
    the files beside it are importable. So every process runs the bytes the host recorded."""
    data = path.read_bytes()
    found = hashlib.sha256(data).hexdigest()
    if sha256 is not None and found != sha256:
        raise messages.VersionChanged(f"{path} has sha256 {found}, not the {sha256} of the bytes krung "
                             f"read")
    shown = str(shown_as or path)
    spec = importlib.util.spec_from_file_location("krung_version", shown)
    if spec is None:
        raise ImportError(f"cannot import {shown}")
    module = importlib.util.module_from_spec(spec)
    # mtime None: linecache never reloads these lines from the user's file, which may differ.
    linecache.cache[shown] = (len(data), None, importlib.util.decode_source(data)
                              .splitlines(keepends=True), shown)
    sys.modules["krung_version"] = module
    sys.path.insert(0, os.path.dirname(shown))  # the version may import files beside it
    exec(compile(data, shown, "exec", dont_inherit=True), module.__dict__)
    return module


def resolve_device(requested: str) -> str:
    """`auto` takes CUDA when torch sees a GPU; cuDNN's convolutions in float32. Must run
    before the version imports Triton."""
    import torch

    # Float32 means float32, here as in the judge where the reference runs: torch lets cuDNN
    # take TF32 algorithms for float32 convolutions, and which one it takes depends on the
    # workspace free at the call, so the reference and the same code here disagreed by TF32's
    # error (KernelBench level 1's 76_ beside other problems; docs/problems.md).
    torch.backends.cudnn.allow_tf32 = False
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # Triton kernels run on CPU tensors
    return requested


def describe_device(device: str) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"device": device, "torch": torch.__version__,
                             "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        facts.update(device_name=props.name, sm=f"{props.major}.{props.minor}",
                     sms=props.multi_processor_count, l2_bytes=props.L2_cache_size,
                     memory_bytes=props.total_memory)
    else:
        facts["device_name"] = "cpu (Triton interpreter)"
    return facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m krung.worker.serve")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--cuda-ipc", action="store_true")
    parser.add_argument("--warm-profiler", action="store_true",
                        help="start CUPTI now (on a GPU), before the first measurement")
    parser.add_argument("--max-file-bytes", type=int, default=1 << 30)
    parser.add_argument("--preload", action="append", default=[],
                        help="a DSL package to import before any version (a warm start)")
    parser.add_argument("--private-mounts", action="store_true",
                        help="enter a mount namespace of its own (the store hidden at load)")
    args = parser.parse_args(argv)
    from krung.worker.guard import adopt_orphans, private_mounts

    # First: the kernel makes a user namespace only for a process of one thread.
    private = private_mounts() if args.private_mounts else "not asked for"
    adopt_orphans()  # what the version double-forks stays below the worker, to be ended with it
    # A print flood (or any runaway file) ends the worker with SIGXFSZ at this size.
    resource.setrlimit(resource.RLIMIT_FSIZE, (args.max_file_bytes, args.max_file_bytes))
    faulthandler.enable()  # a segfault prints the Python stack to the log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the judge asks on a timeout
    channel = Channel.from_fd(args.fd)
    device = resolve_device(args.device)
    preloaded: tuple[str, ...] = ()
    if args.preload:
        preloaded = warm_up(device, args.preload)
    if device == "cuda":
        import torch

        torch.cuda.init()
        from krung.worker import l2

        l2.start()  # no L2 set aside for persisting lines: a limit found later is the version's
        channel.cuda_ipc = args.cuda_ipc
        channel.share_in_place = True  # the judge may read all of this process's memory
        channel.acknowledge = True  # the judge frees its copies of the inputs once we have ours
        if args.warm_profiler:  # on the main thread, CUPTI's one owner (timing.profiler_session)
            from krung.worker.timing import start_profiler

            start_profiler()
    channel.send(messages.Hello(pid=os.getpid(), **describe_device(device)))
    Worker(channel, device, preloaded, private).serve()


if __name__ == "__main__":
    main()
