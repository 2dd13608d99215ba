"""profile: Nsight Compute on the version's kernels, on a GPU, when asked for
(krung.judge.rungs.profile.ncu).

Not in the default ladder: a turn of the loop climbs static..roofline in seconds, and ncu
costs tens of them (it starts the worker under its instrumentation and replays every kernel
once per group of counters). Ask for it with `--rungs +profile` (the default ladder and the
profile) or by naming it; docs/rungs-profile.md says why and what it costs. The roofline
rung does not need it: without a profile its limiter reasons from the benchmark's figures.

A fresh worker runs under ncu; it calls the version once to warm up (JIT compiles and
autotuning happen outside the profile), then once inside the NVTX range ncu is told to
include, on the bench case furthest from the roofline (case.py says how it is chosen, the
figures say which and why). ncu profiles the launches of that one call (as many as the
benchmark counted, at most 32) with the `fast` sections unless KRUNG_PROFILE_SET=full; each
kernel is summarised once, from its first launch: duration, compute and memory throughput
as % of peak, DRAM bytes read and written, achieved and theoretical occupancy, the top
stall reasons, and ncu's rule findings. The `.ncu-rep` is kept in `artifacts/profile/`.

The whole rung (ncu's start and the version's load, the inputs, the calls, ncu writing its
report, reading it) has one time limit, KRUNG_PROFILE_TIMEOUT (60 s by default). Past it,
ncu and the worker are killed with their process group and the rung fails with
ProfileTimeout, naming the step that ran out; the rungs before it were sent when they
finished and keep their results. The figures give each step's seconds (`steps_s`).

The worker under ncu never starts CUPTI itself (no `--warm-profiler`, no torch.profiler):
ncu is the only profiler in that process (docs/timing.md: one owner of the profiler per
process).

Skipped where there is no GPU or no ncu; a clear failure where ncu may not read counters.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.problem import case_label
from krung.judge.rungs.spec import TABLES, Figure, RungSpec
from krung.protocol import messages, tree
from krung.protocol.errors import RungFailed

if TYPE_CHECKING:  # imported where used (ncu's module too): the host imports this for SPEC
    from krung.judge.candidate import Candidate

FOLDER = "artifacts/profile"
SPEC = RungSpec(
    "profile", order=80, needs=("correctness",), on_request=True, gpu_only=True,
    exclusive_gpu=True,
    checks="Nsight Compute over the version's kernels, on the bench case furthest from the "
           "roofline, within KRUNG_PROFILE_TIMEOUT (docs/rungs-profile.md); skipped where "
           "there is no GPU or no ncu, a clear failure where ncu may not read the counters",
    rows="per_kernel", per="kernel", row_label=("kernel",),
    figures=(
        Figure("case", "", "the bench case profiled", "text"),
        Figure("case_chosen_by", "", "the rule that chose it", "text"),
        Figure("case_pct_of_roofline", "%", "its % of the roofline, where that chose it"),
        Figure("kernels", "", "the kernels profiled", "count"),
        Figure("launches_profiled", "", "the launches profiled", "count"),
        Figure("sections", "", "ncu's section set: fast or full (KRUNG_PROFILE_SET)", "text"),
        Figure("clock_control", "", "ncu's --clock-control (KRUNG_PROFILE_CLOCK_CONTROL)",
               "text"),
        Figure("report", "", "the .ncu-rep, in the run's folder", "text"),
        Figure("duration_us", "us", "the profiled launches' GPU time, in all"),
        Figure("limit_s", "s", "the rung's time limit (KRUNG_PROFILE_TIMEOUT)"),
        Figure("steps_s", "s", "the seconds each step took: start, load, inputs, call, report, "
               "read", "map"),
        Figure("note", "", "why there is no kernel to summarise", "text",
               when="when ncu saw none"),
        Figure("kernel", "", "the kernel's name", "text", per_case=True, required=True),
        Figure("duration_ns", "ns", "its GPU time (the first launch)", per_case=True,
               shown=TABLES),
        Figure("compute_pct", "%", "SM throughput, % of peak", per_case=True, shown=TABLES),
        Figure("memory_pct", "%", "memory throughput, % of peak", per_case=True, shown=TABLES),
        Figure("dram_pct", "%", "DRAM throughput, % of peak", per_case=True),
        Figure("dram_read_bytes", "B", "bytes read from DRAM", per_case=True, shown=TABLES),
        Figure("dram_write_bytes", "B", "bytes written to DRAM", per_case=True, shown=TABLES),
        Figure("achieved_occupancy_pct", "%", "the warps active, % of the SM's", per_case=True,
               shown=TABLES),
        Figure("theoretical_occupancy_pct", "%", "the most warps its resources allow, % of the "
               "SM's", per_case=True, shown=TABLES),
        Figure("registers", "", "registers per thread", "count", per_case=True),
        Figure("block_size", "", "threads per block", "count", per_case=True),
        Figure("grid_size", "", "blocks in the grid", "count", per_case=True),
        Figure("static_smem_bytes", "B", "static shared memory per block", "count",
               per_case=True),
        Figure("dynamic_smem_bytes", "B", "dynamic shared memory per block", "count",
               per_case=True),
        Figure("sm_mhz", "MHz", "the SM clock during the launch", per_case=True),
        Figure("top_stalls", "", "the top warp stall reasons, with cycles per issued "
               "instruction", "list", per_case=True),
        Figure("findings", "", "ncu's rule findings, the largest estimated speedup first",
               "list", per_case=True),
        Figure("launches", "", "the launches of this kernel profiled", "count",
               per_case=True),
    ),
    notes="On ProfileTimeout the figures are `limit_s` and `steps_s`.")
LOG_NAME = "worker-profile.log"


class Clock:
    """The rung's time limit, and how long each of its steps took."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.start = time.monotonic()
        self.steps: dict[str, float] = {}
        self.doing = "choosing the case"

    def left(self) -> float:
        return max(0.0, self.start + self.limit_s - time.monotonic())

    @contextlib.contextmanager
    def timing(self, step: str, doing: str) -> Iterator[None]:
        """Time one step (`steps_s[step]`); `doing` says what it is, should it run out."""
        self.doing = doing
        begin = time.monotonic()
        try:
            yield
        finally:
            self.steps[step] = round(time.monotonic() - begin, 3)

    def timed_out(self, candidate: Candidate | None = None) -> RungFailed:
        """ProfileTimeout for the step that was running, with the log's tail."""
        return RungFailed(
            "ProfileTimeout",
            f"the profile rung ran past its limit of {self.limit_s:g} s while {self.doing}; "
            "ncu and the version's process were killed",
            "the rungs before the profile kept their results. To profile anyway: raise the "
            f"limit (KRUNG_PROFILE_TIMEOUT={2 * self.limit_s:g}), keep ncu's sections to the "
            "fast set (KRUNG_PROFILE_SET=fast, the default), or run ncu on the version "
            "yourself; the seconds each step took are in the figures (steps_s), the end of "
            f"ncu's output in the details ({LOG_NAME})",
            figures={"limit_s": self.limit_s, "steps_s": dict(self.steps)},
            details=candidate.log_tail() if candidate is not None else None)


def run(ctx: Context) -> dict[str, Any]:
    from krung.judge.candidate import Candidate, raises_walls
    from krung.judge.rungs.profile import ncu as profile
    from krung.judge.rungs.profile.case import choose_case

    if ctx.device != "cuda":
        raise RungSkipped("profiling needs a GPU (Nsight Compute reads its counters)")
    ncu = profile.find_ncu()
    if ncu is None:
        raise RungSkipped("ncu (Nsight Compute) is not installed or not on PATH")
    clock = Clock(ctx.settings.profile_timeout_s)
    case, chosen = choose_case(ctx)
    label = case_label(case)
    folder = ctx.run_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    report = folder / "version.ncu-rep"
    prefix = profile.command(ncu, report, profile_set=ctx.settings.profile_set,
                             clock_control=ctx.settings.profile_clock_control,
                             source_counters=ctx.settings.profile_source_counters,
                             launch_count=_launches_per_call(ctx, label))
    _free_cached_gpu_memory()  # kernel replay saves what a kernel may write: room on the GPU
    candidate = Candidate("cuda", ctx.run_dir, ctx.solution.path, cuda_ipc=False,
                          prefix=prefix, log_name=LOG_NAME,
                          max_file_bytes=ctx.settings.max_file_bytes)
    candidate.walls = raises_walls(ctx.settings.sandbox, "cuda")
    candidate.start()
    try:
        reply = _profiled_call(ctx, candidate, case, label, clock)
    except RungFailed as failed:
        candidate.kill()
        _check_permission(ctx.run_dir / LOG_NAME, failed)
        if failed.error_type == "Timeout":  # a wait ran out of what was left of the limit
            raise clock.timed_out(candidate) from None
        raise
    except BaseException:
        candidate.kill()
        raise
    with clock.timing("report", "ncu was writing its report"):
        exited = candidate.finish(clock.left())  # ncu writes the report as the worker exits
    _check_permission(ctx.run_dir / LOG_NAME)
    if exited is None and not clock.left():
        raise clock.timed_out(candidate)
    if not reply.get("ok"):
        error = reply["error"]
        raise RungFailed(error.get("type", "Error"), f"{error.get('message')} (under ncu)",
                         error.get("hint"), location=error.get("location"))
    log = (ctx.run_dir / LOG_NAME).read_text(errors="replace")
    done = {"case": label, **chosen}
    if not report.is_file():
        if "No kernels were profiled" in log:
            return {**done, "kernels": 0, "steps_s": clock.steps,
                    "note": "ncu saw no kernel in the version's calls (plain torch operators "
                            "still launch kernels: check the log)"}
        raise RungFailed("ProfilerFailed", "ncu wrote no report", "read the ncu output at the "
                         f"end of {LOG_NAME} (in the details)", details=log[-6000:])
    launches = _read(ncu, report, clock)
    kernels = profile.first_per_kernel(launches)
    return {**done, "kernels": len(kernels), "launches_profiled": len(launches),
            "sections": ctx.settings.profile_set,
            "clock_control": ctx.settings.profile_clock_control,
            "report": f"{FOLDER}/{report.name}",
            "duration_us": round(sum(k.get("duration_ns") or 0 for k in launches) / 1e3, 3),
            "limit_s": clock.limit_s, "steps_s": clock.steps, "per_kernel": kernels}


def _profiled_call(ctx: Context, candidate: Candidate, case: dict, label: str,
                   clock: Clock) -> dict[str, Any]:
    """Start the worker under ncu, load the version, and call it inside the NVTX range;
    every wait is bounded by what is left of the rung's limit."""
    from krung.judge.rungs.profile.ncu import NVTX_RANGE

    with clock.timing("start", "ncu was starting the worker"):
        ctx.progress("profile", f"ncu starting the worker (limit {clock.limit_s:g} s)")
        candidate.hello(clock.left())
    with clock.timing("load", "the version was loading under ncu"):
        reply = candidate.request(ctx.load_message(), clock.left(),
                                  "loading the version under ncu")
    if not reply.get("ok"):
        return reply
    with clock.timing("inputs", "the judge was making the inputs"):
        inputs = ctx.make_inputs(case, ctx.seed_for("profile"))
        cpu = tree.map_tensors(lambda t: t.cpu(), list(inputs))  # nested data, scalars too
        del inputs
    if not clock.left():
        raise clock.timed_out(candidate)
    with clock.timing("call", "the profiled call was running"):
        ctx.progress("profile", f"ncu on case {label}")
        return candidate.request(messages.Profile(inputs=cpu, range=NVTX_RANGE, warmup=1,
                                                  calls=1),
                                 clock.left(), f"the profiled call on case {label}")


def _read(ncu: str, report: Any, clock: Clock) -> list[dict[str, Any]]:
    """The report's per-launch summaries, read within what is left of the limit."""
    from krung.judge.rungs.profile import ncu as profile

    if not clock.left():
        raise clock.timed_out()
    try:
        with clock.timing("read", "the report was being read"):
            return profile.read_report(ncu, report, timeout=clock.left())
    except subprocess.TimeoutExpired:
        raise clock.timed_out() from None
    except (OSError, RuntimeError) as exc:
        raise RungFailed("ProfilerFailed", f"the report could not be read: {exc}",
                         "Nsight Compute's extras/python/ncu_report.py must be next to ncu; "
                         "the .ncu-rep is kept in the run's folder") from None


def _launches_per_call(ctx: Context, label: str) -> float | None:
    """How many kernels one call of the version launched on this case, as the benchmark
    counted them (CUPTI's records: kernels, copies and memsets), if it did."""
    bench = ctx.results.get("benchmark")
    if bench is None or not bench.ok:
        return None
    row = next((r for r in bench.figures.get("per_case") or [] if r.get("case") == label), {})
    value = row.get("kernels_per_call")
    return float(value) if isinstance(value, (int, float)) else None


def _free_cached_gpu_memory() -> None:
    """Hand the judge's cached, unused GPU memory back to the driver. ncu's kernel replay
    saves the memory a kernel may write before its first pass, on the GPU while there is
    room, else in host memory, which makes every pass slow."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


def _check_permission(log_path: Any, cause: Exception | None = None) -> None:
    from krung.judge.rungs.profile.ncu import PERMISSION_ERROR, PERMISSION_HINT

    try:
        log = log_path.read_text(errors="replace")
    except OSError:
        return
    if PERMISSION_ERROR in log:
        line = next(t for t in log.splitlines() if PERMISSION_ERROR in t)
        raise RungFailed("ProfilerPermission", f"ncu may not read the GPU's performance "
                         f"counters: {line.strip()}", PERMISSION_HINT) from cause
