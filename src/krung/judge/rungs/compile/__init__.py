"""compile: the version imports, and its first call compiles (JIT DSLs compile on first use).

The first call runs on the first test case. A compile error fails this rung with the
version's file and line; an error of another kind leaves it to the `run` rung to report.
A DSL the version imports that is not installed fails here with the command that installs
it (krung.judge.dsls), before the version is imported.
On a machine without a GPU, Triton kernels are interpreted, not compiled: the figures say so;
CUDA C++ sources are compiled for sm_90a with nvcc and not run (krung.judge.rungs.compile.nvcc_only), and the
run rung and those after it are skipped; other GPU-only DSLs skip this rung.
"""

from __future__ import annotations

import ast
import time
from dataclasses import replace
from typing import Any

from krung.judge import dsls
from krung.judge.ladder import Context, RungSkipped, failure, poison_leaves
from krung.judge.rungs.artifacts import SPEC as ARTIFACTS
from krung.judge.rungs.correctness import first_case
from krung.judge.rungs.spec import TABLE, Figure, RungSpec
from krung.judge.solution import imported_modules
from krung.protocol import messages
from krung.protocol.errors import RungFailed
from krung.worker.guard import NAN_BYTE

_NVCC = "CUDA C++ without a GPU (compiled with nvcc, not run)"
_KERNEL_FIGURES = ("registers", "static_smem_bytes", "stack_bytes", "spill_store_bytes",
                   "spill_load_bytes", "spills", "local_ops", "threads_per_block", "occupancy")
SPEC = RungSpec(
    "compile", order=20, needs=("static",),
    checks="the DSL is installed (`DSLNotInstalled` with the `pip install` command), the "
           "version imports, and its first call compiles (JIT DSLs compile on first use); a "
           "compile error names the version's line, also for Triton's errors, which Triton "
           "reports relative to the `@jit` function, and for nvcc's inside a CUDA string; "
           "without a GPU, CUDA C++ is compiled with nvcc and not run, and other GPU-only "
           "DSLs skip the rung",
    rows="per_kernel", per="kernel",
    figures=(
        Figure("import_s", "s", "the import of the version in the worker"),
        Figure("first_call_s", "s", "the first call, on the first test case: JIT compiles "
               "happen here"),
        Figure("first_case", "", "the case of the first call where it is not the first test "
               "case as declared: on a CPU, a case too big for the interpreter, shrunk", "text",
               when="a CPU"),
        Figure("worker_start_s", "s", "the worker's own start (Python, torch, the DSL)"),
        Figure("worker_wait_s", "s", "what the judge still waited for the worker after "
               "loading the problem (the worker starts meanwhile)"),
        Figure("mode", "", "how the version ran where that is not plainly: "
               "triton-interpreter (a CPU), or nvcc (no GPU)", "text"),
        Figure("build_s", "s", "torch's builds of the version's CUDA C++ extensions, in all",
               when="CUDA C++ built by torch"),
        Figure("call_s", "s", "the first call besides building", when="CUDA C++ built by torch"),
        Figure("build_cache", "", "whether the build cache under the store held the builds: "
               "hit, miss or partial", "text", when="CUDA C++ built by torch"),
        Figure("extensions", "", "the extensions torch built", "count",
               when="CUDA C++ built by torch"),
        Figure("first_call", "", "what the first call raised besides a compile error (the run "
               "rung reports it)", "text", when="when it raised"),
        Figure("ran", "", "false: the version was compiled, not run", "flag", when=_NVCC),
        Figure("arch", "", "the architecture nvcc compiled for (sm_90a unless "
               "KRUNG_ARTIFACTS_ARCH says)", "text", when=_NVCC),
        Figure("sources", "", "the CUDA sources compiled", "count", when=_NVCC),
        Figure("compile_s", "s", "nvcc and ptxas over the sources", when=_NVCC),
        Figure("cache", "", "whether the build cache held the outputs: hit, miss or partial",
               "text", when=_NVCC),
        Figure("kernels", "", "the kernels compiled", "count", when=_NVCC),
        Figure("max_registers", "", "the most registers per thread of any kernel", "count",
               when=_NVCC),
        Figure("spills", "", "whether ptxas spilled registers in any kernel", "flag",
               when=_NVCC),
        Figure("case", "", "the source and the function: `source:function`", "text",
               per_case=True, when=_NVCC),
        # per kernel, what ptxas and the cubin say, as the artifacts rung reports it
        *(replace(f, shown=(TABLE,), when=_NVCC) for f in ARTIFACTS.columns
          if f.name in _KERNEL_FIGURES),
    ))


def run(ctx: Context) -> dict[str, Any]:
    dsl = _check_installed(ctx)
    if ctx.device == "cpu" and not dsl.runs_on_cpu:
        if dsl.name in ("cuda", "cupy"):
            from krung.judge.rungs.compile.nvcc_only import compile_cuda

            return compile_cuda(ctx, dsl.name)
        raise RungSkipped(f"{dsl.label} kernels need a GPU to compile and run, and there is "
                          "none here (run with --device cuda on a GPU machine)")
    return _first_call(ctx)


def _check_installed(ctx: Context) -> dsls.Dsl:
    imports = imported_modules(ast.parse(ctx.solution.source))
    modules = [name for name, _ in imports]
    gone = dsls.missing(modules, ctx.device)
    if gone:
        names = [m for m, _ in gone]
        line = next((n for m, n in imports if m.split(".")[0] in
                     {g.split(".")[0] for g in names}), None)
        command = dsls.install_command([p for _, p in gone])
        raise RungFailed(
            "DSLNotInstalled",
            f"{ctx.solution.name} needs {', '.join(names)}, which {'is' if len(names) == 1 else 'are'}"
            f" not installed for this Python",
            f"install it: {command}",
            location=f"{ctx.solution.path}:{line}" if line else str(ctx.solution.path),
            details=command)
    return dsls.detect(modules)


def _first_call(ctx: Context) -> dict[str, Any]:
    timeout = ctx.settings.compile_timeout_s
    start = time.perf_counter()
    facts = ctx.candidate.hello(timeout)
    waited_s = time.perf_counter() - start
    start = time.perf_counter()
    loaded = reply = ctx.load()
    load_s = time.perf_counter() - start
    if reply.get("triton"):
        ctx.candidate.facts["triton"] = reply["triton"]
    interpreted = ctx.device == "cpu" and bool(reply.get("triton"))

    case, label = first_case(ctx)
    inputs = ctx.make_inputs(case, ctx.seed_for("compile", 0))
    # output buffers among the inputs hold whatever the judge's allocator had: poison them
    sent = poison_leaves(inputs, ctx.problem.writable_leaves(inputs), NAN_BYTE)
    start = time.perf_counter()
    reply = ctx.candidate.request(messages.Call(inputs=list(sent)), timeout,
                                  "the first call (compile)", limit="--compile-timeout")
    first_call_s = time.perf_counter() - start
    figures: dict[str, Any] = {
        "import_s": round(load_s, 3), "first_call_s": round(first_call_s, 3),
        # the worker starts while the judge loads the problem; this is what was left to wait
        "worker_start_s": facts.get("startup_s"), "worker_wait_s": round(waited_s, 3)}
    if interpreted:
        figures["mode"] = "triton-interpreter"
    if case is not ctx.problem.test_cases[0]:
        figures["first_case"] = label
    figures.update(_build_figures(loaded.get("builds", []), reply.get("builds", []),
                                  first_call_s))
    if not reply.get("ok"):
        error = reply["error"]
        if error.get("kind") == "compile":
            raise failure(error, "the first call (compile)")
        # first in the line: `[compile] ok` alone would read as a version that runs
        figures = {"first_call": f"raised {error.get('type')}: the run rung reports it",
                   **figures}
    return figures


def _build_figures(at_import: list[dict[str, Any]], in_call: list[dict[str, Any]],
                   first_call_s: float) -> dict[str, Any]:
    """torch's CUDA C++ builds (krung.worker.torch_build), kept apart from the time of the call:
    `build_s` in all, `call_s` what the first call took besides building, and whether the
    build cache under the store already held them (`build_cache` hit or miss)."""
    builds = [*at_import, *in_call]
    if not builds:
        return {}
    caches = {b["cache"] for b in builds}
    return {"build_s": round(sum(b["build_s"] for b in builds), 3),
            "call_s": round(max(first_call_s - sum(b["build_s"] for b in in_call), 0.0), 3),
            "build_cache": caches.pop() if len(caches) == 1 else "partial",
            "extensions": len(builds)}
