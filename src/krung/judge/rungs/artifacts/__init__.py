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
import os
from pathlib import Path
from typing import Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.rungs.artifacts import dumped
from krung.judge.rungs.artifacts.inspect import inspect
from krung.judge.rungs.artifacts.target import DEFAULT_ARCH, Target
from krung.judge.solution import detect_dsl
from krung.protocol import build_cache
from krung.protocol.channel import ChannelClosed, spawn
from krung.protocol.errors import RungFailed
from krung.worker import tilelang_kernels

# Not `compile`: CUDA sources compile for the target even where the version cannot be built
# (no GPU); for the other DSLs the rung itself skips when compile failed.
NEEDS = ("static",)
FOLDER = "artifacts"
ROW_KEYS = ("kernel", "function", "symbol", "specialisation", "dsl", "registers", "static_smem_bytes",
            "dynamic_smem_bytes", "stack_bytes", "local_bytes", "spill_store_bytes",
            "spill_load_bytes", "spills", "local_ops", "threads_per_block", "occupancy", "blocks_per_sm",
            "warps_per_sm", "limited_by", "warps_by_registers", "launches", "highlights",
            "sass", "files", "notes", "error", "error_kind", "location")


def run(ctx: Context) -> dict[str, Any]:
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
        reply = ctx.ask({"op": "kernels",
                         "out_dir": str(out_dir) if ctx.device == "cuda" else None},
                        "listing the kernels the version launched", ctx.settings.call_timeout_s)
    elif not cuda_on_cpu or (compiled is not None and compiled.error_type == "DSLNotInstalled"):
        raise RungSkipped(f"needs compile, which {compiled.status.value} (only CUDA sources "
                          "can be compiled without running the version)")
    records: list[dict[str, Any]] = list(reply.get("compiled") or [])
    if dsl == "cutedsl":  # what CuTeDSL compiled as the version ran, kept by the worker
        records += dumped.collect(dumped.dump_dir(ctx.run_dir, dsl), out_dir, dsl, target)
    launches = reply.get("launches") or []
    dsls = (["triton"] if launches else []) + (["cuda"] if dsl in ("cuda", "cupy") else [])
    if dsls:
        records += build_kernels(ctx, out_dir, target, dsls, launches, dsl)
    if not records:
        return {"kernels": 0, "note": f"no kernel to inspect: the version ({dsl}) launched no "
                                      "Triton kernel and has no CUDA source krung can find"}
    rows = [row for record in records for row in inspect(record, out_dir)]
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
                  rung: str = "artifacts") -> list[dict[str, Any]]:
    """Import the version in a build process of its own and have the backends compile; CUDA
    sources come back as text and nvcc compiles them here, out of the version's reach."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONUNBUFFERED"] = "1"
    process, channel = spawn("krung.judge.rungs.artifacts.build",
                             ["--max-file-bytes", str(ctx.settings.max_file_bytes)],
                             log=ctx.run_dir / "build.log", env=env, new_session=True)
    timeout = 2 * ctx.settings.compile_timeout_s
    what = f"compiling the version's kernels for {target.arch}"
    try:
        channel.send({"version": str(ctx.solution.path), "out_dir": str(out_dir),
                      "arch": target.arch, "dsls": dsls + ([dsl] if dsl == "cupy" else []),
                      "launches": launches, "cache_dir": str(build_cache.root_for(ctx.run_dir)),
                      "import_paths": list(ctx.problem.entry.get("import_paths", []))})
        ctx.progress(rung, what)
        if not channel.poll(timeout):
            raise RungFailed("Timeout", f"{what} did not finish within {timeout:g} s",
                             "raise --compile-timeout, or look for an import of the version "
                             "that never ends", details=_tail(ctx.run_dir / "build.log"))
        reply = channel.recv()
    except ChannelClosed:
        process.wait(timeout=30)
        raise RungFailed("BuildCrashed", f"the build process died with status "
                         f"{process.returncode} while {what}",
                         "read the log tail in the details", details=_tail(
                             ctx.run_dir / "build.log")) from None
    finally:
        _stop(process)
        channel.close()
    if not reply.get("ok"):
        error = reply["error"]
        raise RungFailed(error.get("type", "BuildError"), error.get("message", ""),
                         "the version imports in the worker but not in the build process: "
                         "look for import-time code that needs the interpreter or a GPU",
                         details=error.get("details"))
    records = [r for r in reply["records"] if "cuda_source" not in r]
    if "cuda" in dsls:
        from krung.judge.rungs.artifacts import cuda_backend

        auto = ctx.settings.artifacts_arch == "auto"
        arch = cuda_target(ctx, target)
        ctx.progress(rung, f"nvcc for {arch.arch}")
        captured = [r["cuda_source"] for r in reply["records"] if "cuda_source" in r]
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


def _stop(process: Any) -> None:
    import contextlib
    import signal
    import subprocess

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
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
