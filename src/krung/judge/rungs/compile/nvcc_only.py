"""Compiling a CUDA C++ version where there is no GPU: the compile rung's CPU path.

The version cannot be built as torch would (that needs a CUDA build of torch) nor run, but
its CUDA sources can be compiled for the target (sm_90a unless KRUNG_ARTIFACTS_ARCH says
otherwise) with nvcc and ptxas, so a compile error is caught here, at the version's own
line, and ptxas's report says what each kernel costs: registers, shared memory, spills. The
sources are caught by the artifacts rung's build process (krung.judge.rungs.artifacts.cuda_backend:
torch's load_inline/load and CuPy's RawKernel/RawModule, at import) or found by the judge
(literal sources named anywhere in the file, a `.cu` beside the version), and compiled in
the judge, where the version's code never runs; a source that gives no kernel fails. Outputs
are cached under the store (krung.protocol.build_cache), so compiling the same source again is a copy.
"""

from __future__ import annotations

from typing import Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.rungs.artifacts.inspect import inspect_all
from krung.judge.rungs.compile import SPEC
from krung.protocol import build_cache
from krung.protocol.errors import RungFailed

# What the compile rung reports per kernel, as it declares (the artifacts rung reports the
# rest); the kernel and its function become the row's `case`.
KERNEL_KEYS = ("kernel", "function", *(f.name for f in SPEC.columns if f.name != "case"))
NOT_RUN = ("no GPU here: the CUDA sources were compiled for {arch} with nvcc, not run; "
           "running the version needs a GPU")


def compile_cuda(ctx: Context, dsl: str) -> dict[str, Any]:
    from krung.judge.rungs.artifacts import FOLDER, build_kernels, target_for

    target = target_for(ctx)
    out_dir = ctx.run_dir / FOLDER
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx.progress("compile", f"nvcc for {target.arch} (no GPU)")
    try:
        records = build_kernels(ctx, out_dir, target, ["cuda"], [], dsl, rung="compile")
    except RungSkipped as skip:  # no nvcc either
        raise RungSkipped(f"no GPU to build and run the version, and {skip}") from None
    found = [r for r in records if r.get("error_kind") != "not_found"]
    if not found:
        raise RungFailed("NoCudaSource", records[0]["error"] if records else
                         "no CUDA source found",
                         "pass the CUDA text to load_inline (or RawKernel/RawModule) as a "
                         "string literal or a module-level string constant, or put it in a "
                         ".cu file beside the version with its name",
                         location=str(ctx.solution.path))
    broken = [r for r in found if r.get("error")]
    figures = _figures(found, target.arch)
    if broken:
        first = broken[0]
        others = f" (and {len(broken) - 1} more source(s))" if len(broken) > 1 else ""
        raise RungFailed(
            "CudaCompileError",
            f"nvcc could not compile {first['kernel']} for {target.arch}: "
            f"{first.get('message') or first['error'].splitlines()[0]}{others}",
            "fix the CUDA error at the line shown: it is the line of your .py file where "
            "the offending CUDA line sits inside the source string (or of the .cu file)",
            location=first.get("location"), details=first.get("details") or first["error"],
            figures=figures)
    rows = inspect_all(found, out_dir, build_cache.root_for(ctx.run_dir))
    empty = [row for row in rows if row.get("error")]
    if empty:  # compiled, yet no cubin or no kernel in it: nothing was checked
        first = empty[0]
        raise RungFailed(
            "NoKernelCompiled", f"{first['kernel']} compiled for {target.arch} but gave no "
            f"kernel to inspect: {first['error']}",
            "a CUDA source must define at least one __global__ kernel that nvcc compiles to "
            "the cubin; read the notes in the details", location=first.get("location"),
            details="\n".join(first.get("notes") or []) or None, figures=figures)
    per_kernel = [{k: row[k] for k in KERNEL_KEYS if k in row} for row in rows]
    for row in per_kernel:  # the table's first column: source and function
        row["case"] = f"{row.pop('kernel')}:{row.pop('function', '?')}"
    figures.update({
        "kernels": len(per_kernel),
        "max_registers": max((r.get("registers", 0) for r in per_kernel), default=None),
        "spills": any(r.get("spills") for r in per_kernel),
        "per_kernel": per_kernel})
    return figures


def _figures(records: list[dict[str, Any]], arch: str) -> dict[str, Any]:
    caches = {r.get("cache") for r in records}
    cache = caches.pop() if len(caches) == 1 else "partial"
    return {"mode": "nvcc (no GPU)", "ran": False, "arch": arch, "sources": len(records),
            "compile_s": round(sum(r.get("compile_s") or 0 for r in records), 3),
            "cache": cache}
