"""TileLang kernels the version ran, as files. Runs in the worker, where TileLang is.

`@tilelang.jit` compiles on a kernel's first call and keeps it as a `JITKernel`; `install`
(at load) notes every JITKernel that is called, so autotuning candidates that never ran for
the version stay out. Per kernel, `dump` writes the CUDA source TileLang generated, the
CUBIN TileLang built from it (its own compile callback, which hands back its cached binary:
the same options, fast-math and ptxas flags included), and PTX compiled from the source by
TileLang's nvcc helper with its include paths. The judge inspects those files like any
other kernel's (krung.judge.rungs.artifacts.inspect). A TileLang without those helpers still gets its
kernels' sources kept, each with an error saying what was missing.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
SOURCE_NOTE = ("TileLang's CUDA source and the CUBIN it built, PTX by its nvcc helper")
BUDGET_S = 60.0  # for all kernels' nvcc runs, inside the judge's request limit
NO_DYNAMIC_SMEM = ("TileLang sets its dynamic shared memory at launch: occupancy here counts "
                   "registers and static shared memory only")
_ran: dict[int, Any] = {}


def install() -> None:
    """Note every JITKernel the version calls (once per process)."""
    from tilelang.jit.kernel import JITKernel

    call = JITKernel.__call__
    if getattr(call, "_krung_noted", False):
        return

    def noted_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        _ran.setdefault(id(self), self)
        return call(self, *args, **kwargs)

    noted_call._krung_noted = True  # type: ignore[attr-defined]
    JITKernel.__call__ = noted_call


def dump(out_dir: Path, kernels: list[Any] | None = None) -> list[dict[str, Any]]:
    """Write the files of each kernel called (or of `kernels`) to
    `out_dir/<kernel>/<arch>-<hash>.<stage>`: one record per distinct source and arch, with an
    error (the source still kept) where a stage failed."""
    deadline = time.monotonic() + BUDGET_S
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for kernel in list(_ran.values()) if kernels is None else kernels:
        try:
            source = str(kernel.get_kernel_source() or "")
        except Exception:  # a half-built kernel: nothing to show
            continue
        key = (_arch(kernel), source)
        if source and key not in records:
            records[key] = _dump_one(kernel, source, key[0], out_dir, deadline)
    return list(records.values())


def _dump_one(kernel: Any, source: str, arch: str, out_dir: Path,
              deadline: float) -> dict[str, Any]:
    found = _GLOBAL.search(source)
    name = found.group(1) if found else "tilelang_kernel"
    stem = f"{arch}-{hashlib.sha256(source.encode()).hexdigest()[:8]}"
    folder = out_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.cu").write_text(source)
    record: dict[str, Any] = {"kernel": name, "dsl": "tilelang", "specialisation": stem,
                              "files": {"cu": f"{stem}.cu"}, "source": "gpu",
                              "target": f"cuda:{re.sub(r'[^0-9]', '', arch) or '90'}",
                              "notes": [NO_DYNAMIC_SMEM]}
    if time.monotonic() > deadline:
        record.update(error=f"not compiled: the {BUDGET_S:g} s for TileLang's kernels were "
                            "spent on the others", error_kind="tool")
        return record
    try:
        (folder / f"{stem}.cubin").write_bytes(_cubin(kernel, source))
        record["files"]["cubin"] = f"{stem}.cubin"
        (folder / f"{stem}.ptx").write_bytes(_ptx(kernel, source))
        record["files"]["ptx"] = f"{stem}.ptx"
    except Exception as exc:  # a TileLang without these helpers, or no nvcc
        record.update(error=f"{type(exc).__name__}: {exc}"[:2000], error_kind="tool")
    return record


def _arch(kernel: Any) -> str:
    """The arch the kernel was built for (a TVM target keeps it in its attrs)."""
    try:
        arch = str(kernel.target.attrs.get("arch") or "")
        if not arch:
            from tilelang.contrib import nvcc

            arch = f"sm_{nvcc.get_target_arch_and_code(kernel.target)[0]}"
        return arch
    except Exception:
        return "sm_unknown"


def _cubin(kernel: Any, source: str) -> bytes:
    """The binary TileLang built (from its own cache), else one nvcc makes the same way."""
    try:
        from tilelang.cuda.backend import tilelang_callback_cuda_compile
    except ImportError:
        return _nvcc(kernel, source, "cubin")
    return bytes(tilelang_callback_cuda_compile(source, kernel.target,
                                                getattr(kernel, "pass_configs", None)))


def _ptx(kernel: Any, source: str) -> bytes:
    return _nvcc(kernel, source, "ptx")


def _nvcc(kernel: Any, source: str, stage: str) -> bytes:
    from tilelang.contrib import nvcc

    options = nvcc.default_compile_options(getattr(kernel, "compile_flags", None))
    if (getattr(kernel, "pass_configs", None) or {}).get("tl.enable_fast_math"):
        options.append("--use_fast_math")
    with kernel.target:  # nvcc picks the arch from the current target
        return bytes(nvcc.compile_cuda(source, target_format=stage, options=options))
