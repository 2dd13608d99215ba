"""Triton: compile the specialisations a version launched under the interpreter for a GPU.

Runs in the build process (krung.judge.rungs.artifacts.build), which imported the version without the
interpreter, so its `@triton.jit` functions are real JITFunctions. Each launch the worker
described (krung.worker.launches) is rebuilt with stand-in arguments and specialised by
Triton's own binder for the target, then compiled with `triton.compile`: TTIR, TTGIR, LLIR,
PTX and CUBIN, with no GPU needed (Triton ships ptxas).

The GPU-sized bench cases never ran under the interpreter; the request carries every case's
inputs as shapes (krung.judge.rungs.artifacts.cases), and `dry_launches` calls the version's
entry on meta tensors with each launch noted and none run: what the bench cases launch is
compiled too, and every record says which cases launched it.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from krung.judge.rungs.artifacts.target import Target
from krung.protocol.messages import Build
from krung.worker.launches import write_compiled

MAX_COMPILED = 16  # specialisations compiled per evaluation: each takes seconds on a CPU
BENCH = "bench"  # the kind of case the GPU times (krung.judge.rungs.artifacts.cases.KINDS)


class StandInTensor:
    """What Triton's binder reads from a tensor argument: its dtype and its address."""

    def __init__(self, dtype: Any, aligned: bool):
        self.dtype = dtype
        self._address = 0 if aligned else 8

    def data_ptr(self) -> int:
        return self._address


class TritonBackend:
    dsl = "triton"

    def prepare(self, request: Build) -> None:
        """Nothing to hook before the import: the launches were noted by the worker."""

    def collect(self, request: Build, out_dir: Path) -> list[dict[str, Any]]:
        target = Target.parse(request.arch)
        records: list[dict[str, Any]] = []
        launches = request.launches
        if request.cases:
            noted, failed = dry_launches(request.entry, request.cases, request.autotune)
            launches = with_cases(launches, noted)
            records += failed
        for launch in launches[:MAX_COMPILED]:
            try:
                records.append(compile_launch(launch, target, out_dir))
            except Exception as exc:  # one kernel that will not compile must not hide others
                records.append(_failed(launch, exc, Path(request.version)))
        if len(launches) > MAX_COMPILED:
            records.append({"kernel": "triton", "dsl": "triton", "error_kind": "not_compiled",
                            "specialisation": "-",
                            "error": f"{len(launches) - MAX_COMPILED} more specialisations "
                                     f"were launched; the first {MAX_COMPILED} were compiled"})
        return records


def _failed(launch: dict[str, Any], exc: Exception, version: Path) -> dict[str, Any]:
    """A launch that did not compile, explained with the version's own line."""
    from krung.worker.explain import explain

    info = explain(exc, version, "call")
    unsupported = isinstance(exc, LookupError) or (
        isinstance(exc, TypeError) and "cannot be rebuilt" in str(exc))
    kind = "unsupported" if unsupported else "compile"
    return {"kernel": launch["name"], "dsl": "triton", "specialisation": "-",
            "error": f"{info['type']}: {info['message']}"[:4000], "error_kind": kind,
            "location": info.get("location"), "details": info.get("details"),
            "launches": launch.get("launches")}


def compile_launch(launch: dict[str, Any], target: Target, out_dir: Path) -> dict[str, Any]:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = find_jit_function(launch)
    gpu = GPUTarget("cuda", target.capability, 32)
    backend = make_backend(gpu)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    args = [rebuild(a) for a in launch["args"]]
    kwargs = {k: rebuild(v["param"] if isinstance(v, dict) and "param" in v else v)
              for k, v in launch["kwargs"].items()}
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound,
                                                          specialization, options)
    kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu,
                            options=options.__dict__)
    cases = {"cases": launch["cases"], "ran": launch["ran"]} if "cases" in launch else {}
    return write_compiled(kernel, out_dir, {"launches": launch.get("launches"),
                                            "grid": launch.get("grid"), **cases,
                                            "module": launch["module"],
                                            "qualname": launch["qualname"],
                                            "source": f"compiled for {target.arch}"})


def find_jit_function(launch: dict[str, Any]) -> Any:
    """The JITFunction the launch ran, by its module and qualified name (through any
    autotuner or heuristics wrappers)."""
    from triton.runtime.jit import JITFunction

    module = sys.modules.get(launch["module"])
    value: Any = module
    for part in launch["qualname"].split("."):
        value = getattr(value, part, None)
    while value is not None and not isinstance(value, JITFunction) and hasattr(value, "fn"):
        value = value.fn
    if not isinstance(value, JITFunction):
        raise LookupError(f"no @triton.jit function {launch['qualname']} in module "
                          f"{launch['module']} (a kernel defined inside a function cannot be "
                          "found again by name)")
    return value


def rebuild(value: Any) -> Any:
    """A stand-in argument from the worker's description of it."""
    import torch

    if isinstance(value, dict):
        if "tensor" in value:
            return StandInTensor(getattr(torch, value["tensor"]), value["aligned"])
        if "int" in value:
            return value["int"]
        if "float" in value:
            return value["float"]
        if "tuple" in value:
            return tuple(rebuild(v) for v in value["tuple"])
        if "tl_dtype" in value:
            import triton.language as tl

            return tl.dtype(value["tl_dtype"])
        if "unsupported" in value:
            raise TypeError(f"an argument of type {value['unsupported']} cannot be rebuilt "
                            "away from the GPU; its kernel's artifacts come only from a GPU run")
    return value


def dry_launches(entry: dict[str, Any] | None, cases: list[dict[str, Any]],
                 autotune: list[dict[str, Any]] | None = None,
                 ) -> tuple[list[dict[str, Any]], list[dict]]:
    """Per case, the launches the version's entry makes on the case's meta inputs, each
    noted as the worker notes them and none run: [{"kind", "label", "launches"}]; and an
    error record for each bench case whose launches could not be found so. `autotune`: the
    worker's chosen configs, taken again for the keys it tuned."""
    from krung.judge.rungs.artifacts.cases import decode, dynamo_not_imported
    from krung.worker.launches import LaunchLog

    entry = entry or {"kind": "function", "name": "kernel"}
    noted, failed = [], []
    log = [LaunchLog()]
    with _noted_not_run(log, autotune or []), dynamo_not_imported():
        try:
            call = _entry(entry)
        except Exception as exc:  # the version's constructor on the meta device
            return [], [_not_found(f"the entry {entry['name']} could not be made on the meta "
                                   f"device: {type(exc).__name__}: {exc}")]
        for case in cases:
            log[0] = LaunchLog()
            try:
                call(*decode(case["inputs"]))
            except Exception as exc:  # values the meta device does not have, and the like
                if case["kind"] == BENCH:
                    failed.append(_not_found(f"bench case {case['label']}: the version, run on "
                                             f"its shapes alone (meta tensors), raised "
                                             f"{type(exc).__name__}: {exc}"))
            noted.append({**case, "launches": list(log[0].described.values())})
    return noted, failed


def with_cases(launches: list[dict[str, Any]],
               noted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The worker's launches, each with the cases that launch it (`cases`, `ran`), and the
    specialisations only bench cases launch (`ran` false: never run on this machine); those
    a bench case launches first, as they are what the GPU times."""
    cases: dict[str, list[str]] = {}
    first: dict[str, dict[str, Any]] = {}
    for case in noted:
        for launch in case["launches"]:
            key = _identity(launch)
            found = cases.setdefault(key, [])
            if f"{case['label']} ({case['kind']})" not in found:
                found.append(f"{case['label']} ({case['kind']})")
            first.setdefault(key, launch)
    ran = {_identity(launch) for launch in launches}
    merged = [{**launch, "cases": cases.get(_identity(launch), []), "ran": True}
              for launch in launches]
    merged += [{**launch, "launches": None, "cases": cases[key], "ran": False}
               for key, launch in first.items()
               if key not in ran and any(c.endswith(f"({BENCH})") for c in cases[key])]
    return sorted(merged, key=lambda launch: not any(
        c.endswith(f"({BENCH})") for c in launch["cases"]))


def _identity(launch: dict[str, Any]) -> str:
    """What makes two noted launches the same specialisation of the same kernel."""
    return json.dumps([launch.get(k) for k in ("module", "qualname", "args", "kwargs")],
                      sort_keys=True, default=str)


def _entry(entry: dict[str, Any]) -> Any:
    """The version's callable; a KernelBench model built on the meta device (shapes only:
    krung's weights are not needed to know what it launches)."""
    import torch

    from krung.judge.rungs.artifacts.cases import decode

    found = getattr(sys.modules["krung_version"], entry["name"])
    if entry["kind"] != "module":
        return found
    torch.set_grad_enabled(False)
    with torch.device("meta"):
        model = found(*decode(entry.get("init_inputs") or []))
    return model.to(dtype=getattr(torch, entry.get("dtype") or "float32"))


@contextlib.contextmanager
def _noted_not_run(log: list[Any], chosen: list[dict[str, Any]]) -> Iterator[None]:
    """Every Triton launch noted in `log[0]` and not run. @triton.autotune takes the config
    the worker's autotuner chose (`chosen`: its records) for the same kernel and key; for a
    key it never tuned (a GPU-sized bench case), the one chosen for the kernel's largest
    tuned key, the nearest stand-in; the first config where the kernel was never tuned."""
    from triton.runtime import autotuner, jit

    from krung.worker.launches import plain

    original_run, original_bench = jit.JITFunction.run, autotuner.Autotuner._bench

    def size(record: dict[str, Any]) -> int:
        return math.prod(v for v in record["key"].values() if isinstance(v, int))

    exact = {_tuned_key(c["kernel"], c["key"]): c["config"] for c in chosen}
    largest = {c["kernel"]: c["config"] for c in sorted(chosen, key=size)}

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        if not warmup:
            log[0].note_interpreted(self.fn, args, kwargs, grid)

    def bench(self: Any, *args: Any, config: Any, **meta: Any) -> list[float]:
        named = {**dict(zip(self.arg_names, args, strict=False)), **meta}
        name = getattr(self.base_fn, "__name__", "kernel")
        key = {k: plain(named[k]) for k in self.keys if k in named}
        pick = exact.get(_tuned_key(name, key), largest.get(name))
        offered = {k: plain(v) for k, v in config.all_kwargs().items() if v is not None}
        if pick and all(offered.get(k) == v for k, v in pick.items()):
            return [0.5, 0.5, 0.5]
        return [1.0, 1.0, 1.0]  # the rest tie: the autotuner keeps the first of them

    jit.JITFunction.run = run
    autotuner.Autotuner._bench = bench
    try:
        yield
    finally:
        jit.JITFunction.run = original_run
        autotuner.Autotuner._bench = original_bench


def _tuned_key(kernel: str, key: dict[str, Any]) -> str:
    return json.dumps([kernel, key], sort_keys=True, default=str)


def _not_found(message: str) -> dict[str, Any]:
    return {"kernel": "triton", "dsl": "triton", "specialisation": "-",
            "error_kind": "not_compiled", "error": message[:2000]}
