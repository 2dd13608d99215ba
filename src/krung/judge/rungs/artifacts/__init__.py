"""artifacts: what the compiler made of the version's kernels, and what that says.

After the version has run (here: after the benchmark, so every specialisation the test and
bench cases needed has been launched; it needs only `static` and `compile`, so a version that
fails correctness still gets its artifacts), krung collects per kernel and specialisation the
stages its DSL produces into the run's folder, `artifacts/<kernel>/<specialisation>.<stage>`:
- Triton on a GPU: the kernels the worker actually compiled (TTIR, TTGIR, LLIR, PTX, CUBIN);
- Triton on a CPU: the launches the interpreter ran, compiled for sm_90a (or
  KRUNG_ARTIFACTS_ARCH) in a separate build process;
- CUDA C++ (torch's load_inline/load, CuPy's RawKernel, a `.cu` beside the version): the
  build process catches the sources, the judge compiles them with nvcc (for the GPU's own
  arch, as torch builds them, or the arch the version's flags name);
- CuTeDSL: the PTX and CUBIN its compiler kept as the version ran (krung.judge.rungs.artifacts.dumped);
- TileLang: the CUDA source of every kernel it compiled, with PTX and CUBIN built from it by
  TileLang's own nvcc helper in the worker (krung.worker.tilelang_kernels).
Then SASS and the resource reports, and per function the figures (krung.judge.rungs.artifacts.inspect).
A kernel that runs under the interpreter but does not compile for the GPU fails the rung.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.rungs.artifacts.target import DEFAULT_ARCH, Target
from krung.judge.rungs.spec import TABLES, Figure, RungSpec
from krung.judge.solution import detect_dsl
from krung.protocol import build_cache, messages
from krung.protocol.errors import RungFailed

# The tools, parsers and the build process are imported where they are used: the host imports
# this package for SPEC alone.

FOLDER = "artifacts"
_ERROR = "for a kernel that did not compile"
SPEC = RungSpec(
    # Not `compile`: CUDA sources compile for the target even where the version cannot be
    # built (no GPU); for the other DSLs the rung itself skips when compile failed.
    "artifacts", order=70, needs=("static",),
    checks="what the compiler made of every kernel the version launched (docs/inspect.md): "
           "TTIR, TTGIR, LLIR, PTX, CUBIN, SASS and ptxas's report per kernel and "
           "specialisation, in the run's folder; on a CPU, Triton kernels are compiled for "
           "sm_90a, and a kernel that the interpreter runs but the compiler rejects fails "
           "(`TargetCompileError`)",
    rows="per_kernel", per="kernel", row_label=("kernel", "specialisation"),
    figures=(
        Figure("arch", "", "the architecture the kernels were compiled for", "text"),
        Figure("source", "", "where the figures come from: the kernels the GPU ran, krung's "
               "own compile for the arch, or krung's nvcc over the version's CUDA sources",
               "text"),
        Figure("kernels", "", "the kernels", "count"),
        Figure("specialisations", "", "the kernels' specialisations (one per set of constants "
               "and argument properties they were compiled for)", "count"),
        Figure("max_registers", "", "the most registers per thread of any kernel", "count"),
        Figure("spills", "", "whether ptxas spilled registers in any kernel", "flag"),
        Figure("min_occupancy", "", "the lowest occupancy of any kernel"),
        Figure("tensor_core_instructions", "", "tensor-core instructions in the SASS of all "
               "kernels", "count"),
        Figure("folder", "", "the kernels' files, in the run's folder", "text"),
        Figure("autotune", "", "the configs @triton.autotune chose (their kernels are among "
               "the rows)", "list", when="autotuned versions"),
        Figure("note", "", "why there is no kernel to inspect", "text",
               when="when there is none"),
        Figure("kernel", "", "the kernel (Triton's function, or the CUDA source)", "text",
               per_case=True, required=True),
        Figure("function", "", "the function in the cubin, demangled and shortened", "text",
               per_case=True),
        Figure("symbol", "", "the function's symbol in the cubin", "text", per_case=True),
        Figure("specialisation", "", "what the kernel was compiled for (its file stem)", "text",
               per_case=True),
        Figure("dsl", "", "the DSL that built it", "text", per_case=True),
        Figure("registers", "", "registers per thread", "count", per_case=True, shown=TABLES),
        Figure("static_smem_bytes", "B", "static shared memory per block", "count",
               per_case=True, shown=TABLES),
        Figure("dynamic_smem_bytes", "B", "dynamic shared memory per block (Triton's)", "count",
               per_case=True, shown=TABLES),
        Figure("stack_bytes", "B", "stack frame per thread", "count", per_case=True),
        Figure("local_bytes", "B", "local memory per thread", "count", per_case=True),
        Figure("spill_store_bytes", "B", "bytes spilled to local memory (stores), per ptxas",
               "count", per_case=True),
        Figure("spill_load_bytes", "B", "bytes read back from spills (loads), per ptxas",
               "count", per_case=True),
        Figure("spills", "", "whether ptxas spilled registers", "flag", per_case=True,
               shown=TABLES),
        Figure("local_ops", "", "local-memory loads and stores in the SASS (spills and "
               "per-thread arrays)", "count", per_case=True),
        Figure("threads_per_block", "", "the block size, where it is known", "count",
               per_case=True),
        Figure("occupancy", "", "the fraction of an SM's warps that can be resident with these "
               "resources", per_case=True, shown=TABLES),
        Figure("blocks_per_sm", "", "the blocks an SM can hold", "count", per_case=True),
        Figure("warps_per_sm", "", "the warps an SM can hold", "count", per_case=True),
        Figure("limited_by", "", "the resource that binds the occupancy: warps, blocks, "
               "registers or shared_memory", "text", per_case=True, shown=TABLES),
        Figure("warps_by_registers", "", "the warps per SM the registers alone allow", "count",
               per_case=True),
        Figure("launches", "", "the launches of this specialisation", "count", per_case=True),
        Figure("cases", "", "the cases that launch this specialisation, `label (kind)`: on a "
               "CPU, found by calling the version on each case's shapes (meta tensors), so "
               "the GPU-sized bench cases are covered too", "list", per_case=True,
               when="on a CPU"),
        Figure("ran", "", "whether the specialisation ran here (false: only a bench case "
               "launches it, compiled from its shapes)", "flag", per_case=True,
               when="on a CPU"),
        Figure("highlights", "", "what stands out in the SASS: tensor-core instructions, "
               "vector widths, TMA, local memory", "text", per_case=True, shown=TABLES),
        Figure("sass", "", "the instruction mix: counts per opcode group", "map",
               per_case=True),
        Figure("files", "", "the kernel's files by stage (ptx, cubin, sass, ...)", "map",
               per_case=True),
        Figure("notes", "", "what the tools said", "list", per_case=True),
        Figure("error", "", "why the kernel gave no figures", "text", per_case=True,
               shown=TABLES, when=_ERROR),
        Figure("error_kind", "", "compile, no_toolkit, not_found, unsupported or not_compiled",
               "text", per_case=True,
               when=_ERROR),
        Figure("location", "", "file:line of the compile error in the version", "text",
               per_case=True, when=_ERROR),
    ))
# A kernel's row holds what the declaration names (the inspection finds more).
ROW_KEYS = tuple(f.name for f in SPEC.columns)


def run(ctx: Context) -> dict[str, Any]:
    from krung.judge.rungs.artifacts import dumped
    from krung.judge.rungs.artifacts.inspect import inspect_all
    from krung.worker import tilelang_kernels

    out_dir = ctx.run_dir / FOLDER
    out_dir.mkdir(parents=True, exist_ok=True)
    target = target_for(ctx)
    dsl = detect_dsl(ast.parse(ctx.solution.source))
    compiled = ctx.results.get("compile")
    reply: dict[str, Any] = {}
    # A CUDA version is never imported by a worker without a GPU (nvcc compiles its sources).
    cuda_on_cpu = ctx.device == "cpu" and dsl in ("cuda", "cupy")
    ran = not cuda_on_cpu and (compiled is None or (compiled.ok and compiled.figures.get("ran",
                                                                                     True)))
    if ran:
        reply = ctx.ask(messages.Kernels(out_dir=str(out_dir) if ctx.device == "cuda" else None),
                        "listing the kernels the version launched", ctx.settings.call_timeout_s)
    elif not cuda_on_cpu or (compiled is not None and compiled.error_type == "DSLNotInstalled"):
        raise RungSkipped(f"needs compile, which {compiled.status.value} (only CUDA sources "
                          "can be compiled without running the version)")
    records: list[dict[str, Any]] = list(reply.get("compiled") or [])
    if dsl == "cutedsl":  # what CuTeDSL compiled as the version ran, kept by the worker
        records += dumped.collect(dumped.dump_dir(ctx.run_dir, dsl), out_dir, dsl, target)
    launches = reply.get("launches") or []
    # On a CPU the bench cases never ran: what they launch is found from their shapes.
    dry = ran and ctx.device == "cpu" and (bool(launches) or dsl == "triton")
    dsls = (["triton"] if launches or dry else []) + (["cuda"] if dsl in ("cuda", "cupy") else [])
    if dsls:
        records += build_kernels(ctx, out_dir, target, dsls, launches, dsl, dry=dry,
                                 autotune=reply.get("autotune") or [])
    if not records:
        return {"kernels": 0, "note": f"no kernel to inspect: the version ({dsl}) launched no "
                                      "Triton kernel and has no CUDA source krung can find"}
    rows = inspect_all(records, out_dir, build_cache.root_for(ctx.run_dir))
    for row in rows:
        row["files"] = {k: f"{FOLDER}/{row['kernel']}/{v}"
                        for k, v in _files_of(records, row).items()}
    figures = _summary(rows, target, ctx.device, recompiled=dsl in ("cuda", "cupy"))
    if any(r.get("dsl") == "tilelang" for r in records):
        figures["source"] = f"kernels the GPU ran ({tilelang_kernels.SOURCE_NOTE})"
    if reply.get("autotune"):  # the configs @triton.autotune chose: their kernels are above
        figures["autotune"] = reply["autotune"]
    broken = [r for r in rows if r.get("error") and r.get("error_kind", "compile") == "compile"]
    if broken:
        first = broken[0]
        raise RungFailed(
            "TargetCompileError",
            f"{len(broken)} of {len(rows)} kernel(s) did not compile for {target.arch}; "
            f"{first['kernel']}: {first['error'].splitlines()[0]}",
            "the kernel runs (under Triton's interpreter, or not at all on this machine) but "
            "its compiler rejects it: fix the error in the details; the interpreter accepts "
            "code the compiler does not",
            location=first.get("location"), details=first.get("details") or first["error"],
            figures=figures)
    return figures


def target_for(ctx: Context) -> Target:
    if ctx.settings.artifacts_arch != "auto":
        return Target.parse(ctx.settings.artifacts_arch)
    sm = str(ctx.env.get("sm") or "")
    if ctx.device == "cuda" and sm:
        major, minor = sm.split(".")
        return Target(f"sm_{major}{minor}{'a' if int(major) >= 9 else ''}")
    return Target(DEFAULT_ARCH)


def cuda_target(ctx: Context, target: Target) -> Target:
    """What CUDA C++ is compiled for: on a GPU, the arch torch (and NVRTC) builds for, the
    GPU's own without the `a` (sm_90, not sm_90a), unless KRUNG_ARTIFACTS_ARCH says."""
    if ctx.device == "cuda" and ctx.settings.artifacts_arch == "auto":
        return Target(target.arch.rstrip("a"))
    return target


def build_kernels(ctx: Context, out_dir: Path, target: Target, dsls: list[str],
                  launches: list[dict[str, Any]], dsl: str,
                  rung: str = "artifacts", dry: bool = False,
                  autotune: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Import the version in a build process of its own and have the backends compile; CUDA
    sources come back as text and nvcc compiles them here, out of the version's reach.
    `dry`: also what every case launches, found from its shapes (artifacts/cases.py), with
    the configs `autotune` records the worker's autotuner chose."""
    import shutil
    import tempfile

    from krung.judge.candidate import (
        cache_folders,
        end_tree,
        hidden_store,
        raises_walls,
        worker_cache,
        worker_env,
    )
    from krung.protocol.channel import ChannelClosed
    from krung.worker import zygote

    # The version's code runs there (its import, its entry on the cases' shapes): fenced as
    # the worker is (docs/trust.md): allow-listed environment, a scratch folder, the walls.
    scratch, cache = Path(tempfile.mkdtemp(prefix="krung-build-")), worker_cache()
    fenced = raises_walls(ctx.settings.sandbox, ctx.device)
    # the version's own caches where the walls protect them, else the workers' shared ones
    env = worker_env(scratch, cache, sha256=ctx.solution.sha256 if fenced else None,
                     shared=not fenced)
    env.pop("TRITON_INTERPRET", None)
    walls, args = None, ["--max-file-bytes", str(ctx.settings.max_file_bytes)]
    if fenced:
        hidden, keep = hidden_store(ctx.settings.store, ctx.run_dir,
                                    [ctx.problem.path, ctx.solution.path.parent])
        walls = {"writable": [str(scratch), *cache_folders(env), str(out_dir), "/dev"],
                 "hidden": hidden, "keep": keep}
        if ctx.device == "cpu":  # where the store can be hidden (as in the worker)
            args.append("--private-mounts")
    # forked from the zygote made at the judge's start, where there is one (KRUNG_FORK_WORKER)
    process, channel = zygote.start(zygote.take("build"), args, log=ctx.run_dir / "build.log",
                                    env=env, cwd=scratch, module=zygote.ROLES["build"])
    timeout = 2 * ctx.settings.compile_timeout_s
    what = f"compiling the version's kernels for {target.arch}"
    cases, entry, unmade = [], None, []
    try:
        if dry:  # while the build process starts
            from krung.judge.rungs.artifacts.cases import dry_cases

            ctx.progress(rung, "the cases' inputs as shapes")
            cases, entry, unmade = dry_cases(ctx)
        request = messages.Build(
            version=str(ctx.solution.copy or ctx.solution.path), shown_as=str(ctx.solution.path),
            sha256=ctx.solution.sha256, out_dir=str(out_dir), arch=target.arch,
            dsls=dsls + ([dsl] if dsl == "cupy" else []), launches=launches,
            import_paths=list(ctx.problem.entry.get("import_paths", [])),
            cases=cases, entry=entry, autotune=autotune or [], sandbox=walls)
        channel.send(request)
        ctx.progress(rung, what)
        if not channel.poll(timeout):
            raise RungFailed("Timeout", f"{what} did not finish within {timeout:g} s",
                             "raise --compile-timeout, or look for an import of the version "
                             "that never ends", details=_tail(ctx.run_dir / "build.log"))
        reply = channel.recv(expect=messages.replies(request))
    except messages.ProtocolError as exc:  # the version's import can write to the channel
        raise RungFailed("ProtocolError", f"the build process sent a malformed message while "
                         f"{what}: {exc}", "a version must not write to krung's channel") from None
    except ChannelClosed:
        process.wait(timeout=30)
        raise RungFailed("BuildCrashed", f"the build process died with status "
                         f"{process.returncode} while {what}",
                         "read the log tail in the details", details=_tail(
                             ctx.run_dir / "build.log")) from None
    finally:
        end_tree(process.pid)
        _reap(process)
        channel.close()
        shutil.rmtree(scratch, ignore_errors=True)
    if isinstance(reply, messages.Failed):
        error = reply.error
        raise RungFailed(error["type"], error["message"],
                         "the version imports in the worker but not in the build process: "
                         "look for import-time code that needs the interpreter or a GPU",
                         details=error.get("details"))
    records = [r for r in reply.records if "cuda_source" not in r]
    records += [{"kernel": "triton", "dsl": "triton", "specialisation": "-",
                 "error_kind": "not_compiled", "error": why[:2000]} for why in unmade]
    if "cuda" in dsls:
        from krung.judge.rungs.artifacts import cuda_backend

        auto = ctx.settings.artifacts_arch == "auto"
        arch = cuda_target(ctx, target)
        ctx.progress(rung, f"nvcc for {arch.arch}")
        captured = [r["cuda_source"] for r in reply.records if "cuda_source" in r]
        records += cuda_backend.compile_all(ctx.solution.path, captured, arch, out_dir,
                                            build_cache.root_for(ctx.run_dir),
                                            arch_from_flags=auto)
    if "cuda" in dsls and not any(r.get("dsl") == "cuda" for r in records):
        records.append({"kernel": "cuda", "dsl": "cuda", "specialisation": target.arch,
                        "error": "no CUDA source found: krung catches torch's load_inline and "
                                 "load, CuPy's RawKernel and RawModule at import, and a .cu "
                                 "file beside the version with its name",
                        "error_kind": "not_found"})
    nvcc_missing = [r for r in records if r.get("error_kind") == "no_toolkit"]
    if nvcc_missing and len(nvcc_missing) == len(records):
        raise RungSkipped(nvcc_missing[0]["error"])
    return records


def _reap(process: Any) -> None:
    import contextlib
    import subprocess

    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def _tail(path: Path, limit: int = 8000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def _files_of(records: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, str]:
    for record in records:
        if record["kernel"] == row["kernel"] and record.get("specialisation") == \
                row.get("specialisation"):
            return dict(record.get("files") or {})
    return {}


def _summary(rows: list[dict[str, Any]], target: Target, device: str,
             recompiled: bool = False) -> dict[str, Any]:
    good = [r for r in rows if not r.get("error")]
    occupancies = [r["occupancy"] for r in good if r.get("occupancy") is not None]
    figures: dict[str, Any] = {
        "arch": target.arch,
        "source": _source_label(rows, target, device, recompiled),
        "kernels": len({r["kernel"] for r in rows}),
        "specialisations": len({(r["kernel"], r.get("specialisation")) for r in rows}),
        "max_registers": max((r.get("registers", 0) for r in good), default=None),
        "spills": any(r.get("spills") for r in good),
        "min_occupancy": min(occupancies) if occupancies else None,
        "tensor_core_instructions": sum(r.get("sass", {}).get("tensor_core_total", 0)
                                        for r in good),
        "folder": FOLDER,
        "per_kernel": [{k: r[k] for k in ROW_KEYS if k in r} for r in rows],
    }
    return figures


def _source_label(rows: list[dict[str, Any]], target: Target, device: str,
                  recompiled: bool) -> str:
    """Where the figures come from: the kernels the GPU ran, or krung's own compile."""
    if recompiled:  # CUDA C++: krung's nvcc, from the sources torch or CuPy built
        archs = sorted({str(r.get("specialisation")) for r in rows if r.get("dsl") == "cuda"})
        return (f"recompiled by krung with nvcc for {', '.join(archs) or target.arch} from the "
                "version's CUDA sources" + (" (as torch builds them)" if device == "cuda" else ""))
    return "kernels the GPU ran" if device == "cuda" else f"compiled for {target.arch}"
