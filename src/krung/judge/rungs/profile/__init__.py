"""profile: Nsight Compute on the version's kernels, on a GPU (krung.judge.rungs.profile.ncu).

A fresh worker runs under ncu; it calls the version once to warm up (JIT compiles happen
outside the profile), then once inside the NVTX range ncu is told to include, on the first
bench case. The `.ncu-rep` is kept in `artifacts/profile/`; the figures are a summary per
kernel: duration, compute and memory throughput as % of peak, DRAM bytes read and written,
achieved and theoretical occupancy, the top stall reasons, and ncu's rule findings.
Skipped where there is no GPU or no ncu; a clear failure where ncu may not read counters.
"""

from __future__ import annotations

from typing import Any

from krung.judge.candidate import Candidate
from krung.judge.ladder import Context, RungSkipped
from krung.judge.problem import case_label
from krung.judge.rungs.profile import ncu as profile
from krung.protocol import tree
from krung.protocol.errors import RungFailed

NEEDS = ("correctness",)
FOLDER = "artifacts/profile"


def run(ctx: Context) -> dict[str, Any]:
    if ctx.device != "cuda":
        raise RungSkipped("profiling needs a GPU (Nsight Compute reads its counters)")
    ncu = profile.find_ncu()
    if ncu is None:
        raise RungSkipped("ncu (Nsight Compute) is not installed or not on PATH")
    case = ctx.problem.bench_cases_for(ctx.device)[0]
    folder = ctx.run_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    report = folder / "version.ncu-rep"
    prefix = profile.command(ncu, report, clock_control=ctx.settings.profile_clock_control,
                             source_counters=ctx.settings.profile_source_counters)
    log_name = "worker-profile.log"
    candidate = Candidate("cuda", ctx.run_dir, ctx.solution.path, cuda_ipc=False,
                          prefix=prefix, log_name=log_name,
                          max_file_bytes=ctx.settings.max_file_bytes)
    candidate.start()
    timeout = 4 * ctx.settings.compile_timeout_s
    label = case_label(case)
    try:
        ctx.progress("profile", f"ncu on case {label}")
        reply = candidate.request(ctx.load_message(), timeout, "loading the version under ncu")
        if reply.get("ok"):
            inputs = ctx.make_inputs(case, ctx.seed_for("profile"))
            cpu = tree.map_tensors(lambda t: t.cpu(), list(inputs))  # nested data, scalars too
            reply = candidate.request({"op": "profile", "inputs": cpu,
                                       "range": profile.NVTX_RANGE, "warmup": 1, "calls": 1},
                                      timeout, f"the profiled call on case {label}")
    except RungFailed as failed:
        _check_permission(ctx.run_dir / log_name, failed)
        raise
    finally:
        _finish(candidate, timeout)
    log = (ctx.run_dir / log_name).read_text(errors="replace")
    _check_permission(ctx.run_dir / log_name)
    if not reply.get("ok"):
        error = reply["error"]
        raise RungFailed(error.get("type", "Error"), f"{error.get('message')} (under ncu)",
                         error.get("hint"), location=error.get("location"))
    if not report.is_file():
        if "No kernels were profiled" in log:
            return {"case": label, "kernels": 0,
                    "note": "ncu saw no kernel in the version's calls (plain torch operators "
                            "still launch kernels: check the log)"}
        raise RungFailed("ProfilerFailed", "ncu wrote no report", "read the ncu output at the "
                         f"end of {log_name} (in the details)", details=log[-6000:])
    try:
        kernels = profile.read_report(ncu, report)
    except (OSError, RuntimeError) as exc:
        raise RungFailed("ProfilerFailed", f"the report could not be read: {exc}",
                         "Nsight Compute's extras/python/ncu_report.py must be next to ncu; "
                         "the .ncu-rep is kept in the run's folder") from None
    return {"case": label, "kernels": len(kernels), "clock_control":
            ctx.settings.profile_clock_control, "report": f"{FOLDER}/{report.name}",
            "duration_us": round(sum(k.get("duration_ns") or 0 for k in kernels) / 1e3, 3),
            "per_kernel": kernels}


def _finish(candidate: Candidate, timeout: float) -> None:
    """End the worker so ncu writes its report: close its channel, let it exit, then wait
    for ncu; kill only what is still there after that."""
    import contextlib
    import subprocess

    if candidate.channel is not None:
        candidate.channel.close()
    if candidate.process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            candidate.process.wait(timeout=timeout)
    candidate.kill()


def _check_permission(log_path: Any, cause: Exception | None = None) -> None:
    try:
        log = log_path.read_text(errors="replace")
    except OSError:
        return
    if profile.PERMISSION_ERROR in log:
        line = next(t for t in log.splitlines() if profile.PERMISSION_ERROR in t)
        raise RungFailed("ProfilerPermission", f"ncu may not read the GPU's performance "
                         f"counters: {line.strip()}", profile.PERMISSION_HINT) from cause
