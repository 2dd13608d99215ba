"""Triton: compile the specialisations a version launched under the interpreter for a GPU.

Runs in the build process (krung.judge.rungs.artifacts.build), which imported the version without the
interpreter, so its `@triton.jit` functions are real JITFunctions. Each launch the worker
described (krung.worker.launches) is rebuilt with stand-in arguments and specialised by
Triton's own binder for the target, then compiled with `triton.compile`: TTIR, TTGIR, LLIR,
PTX and CUBIN, with no GPU needed (Triton ships ptxas).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from krung.judge.rungs.artifacts.target import Target
from krung.protocol.messages import Build
from krung.worker.launches import write_compiled

MAX_COMPILED = 16  # specialisations compiled per evaluation: each takes seconds on a CPU


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
        records = []
        launches = request.launches
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
    return write_compiled(kernel, out_dir, {"launches": launch.get("launches"),
                                            "grid": launch.get("grid"),
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
