"""The profile rung (Nsight Compute) and the trace rung (krung.tracer) where they can run
here, without a GPU: both skip with the reason, the ncu command profiles only the version's
range with the sections asked for, the profile's time limit kills a stand-in ncu that never
ends and keeps the earlier rungs' results, the case furthest from the roofline is the one
profiled, `+profile` adds the profile to the default ladder, a counter-permission error is
explained with the fix, the tracer compiles to timer reads for sm_90a and away to nothing
without a buffer, and a trace's records become a Chrome trace and per-region figures. On a
GPU: tests/test_gpu_profile_trace.py."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

import krung
from krung.judge.rungs import trace as trace_rung
from krung.judge.rungs.profile import _check_permission
from krung.judge.rungs.profile import ncu as profile
from krung.protocol.errors import RungFailed
from tests.conftest import GOOD

pytest.importorskip("triton")

TRACED = '''
import torch
import triton
import triton.language as tl

import krung.tracer as kt


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, trace, BLOCK: tl.constexpr):
    kt.start(trace, 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    kt.stop(trace, 0)
    kt.start(trace, 1)
    tl.store(y_ptr + offs, x.to(tl.float32) * 2 + 1, mask=offs < n)
    kt.stop(trace, 1)


def kernel(x):
    y = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 256),)
    scale_kernel[grid](x, y, x.numel(), kt.buffer(grid, ["load", "store"]), BLOCK=256)
    return y
'''


def test_profile_and_trace_are_skipped_without_a_gpu(store, scale_problem, version):
    run = krung.evaluate(scale_problem, version("traced", TRACED), store=store, device="cpu",
                         rungs="static,compile,run,correctness,profile,trace")
    assert run.ok, "\n".join(r.line() for r in run.rungs)  # skipped is not failed
    assert run.rung("correctness").ok  # the tracer's calls are no-ops without a buffer
    for name in ("profile", "trace"):
        rung = run.rung(name)
        assert rung.status is krung.Status.SKIPPED and "GPU" in rung.reason


def test_the_tracer_reads_the_timer_only_when_given_a_buffer(store, scale_problem, version):
    run = krung.evaluate(scale_problem, version("traced", TRACED), store=store, device="cpu",
                         rungs="static,compile,run,artifacts")
    row = run.rung("artifacts").figures["per_kernel"][0]
    ptx = (store.parent / "runs" / run.run_id / row["files"]["ptx"]).read_text()
    assert "%globaltimer" not in ptx  # trace=None: compiled out

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    namespace: dict = {}
    path = version("traced_module", TRACED)
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "trace": "*i64",
                 "BLOCK": "constexpr"}
    compiled = triton.compile(ASTSource(namespace["scale_kernel"], signature, {"BLOCK": 256}),
                              target=GPUTarget("cuda", 90, 32))
    ptx = compiled.asm["ptx"]
    assert ptx.count("%globaltimer") == 4 and "%smid" in ptx


def sections_of(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == "--section"]


def test_ncu_profiles_only_the_versions_range_with_the_gpus_own_clocks(tmp_path):
    report = tmp_path / "v.ncu-rep"
    args = profile.command("/opt/ncu", report)
    assert args[0] == "/opt/ncu"
    assert args[args.index("--nvtx-include") + 1] == f"{profile.NVTX_RANGE}/"
    assert "--nvtx" in args and args[args.index("--clock-control") + 1] == "none"
    assert args[args.index("--launch-count") + 1] == str(profile.LAUNCH_COUNT)
    assert args[args.index("--export") + 1] == str(report)
    assert "--kernel-id" not in args  # invocation numbers would count the warm-up's launches
    more = profile.command("/opt/ncu", report, clock_control="base", source_counters=True)
    assert more[more.index("--clock-control") + 1] == "base" and "SourceCounters" in more


def test_the_fast_sections_are_what_krung_reads_and_full_adds_memory_analysis(tmp_path):
    fast = sections_of(profile.command("/opt/ncu", tmp_path / "v.ncu-rep"))
    full = sections_of(profile.command("/opt/ncu", tmp_path / "v.ncu-rep", profile_set="full"))
    assert fast == ["SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats"]
    assert full == ["SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats",
                    "WarpStateStats"]  # the sections of every profile before the fast set
    with_source = profile.command("/opt/ncu", tmp_path / "v.ncu-rep", source_counters=True)
    assert sections_of(with_source) == [*fast, "SourceCounters"]
    # DRAM traffic is in no section's header: asked for by name in either set.
    args = profile.command("/opt/ncu", tmp_path / "v.ncu-rep")
    assert set(args[args.index("--metrics") + 1].split(",")) >= {"dram__bytes_read.sum",
                                                                  "dram__bytes_write.sum"}
    assert krung.Settings().profile_set == "fast"
    assert krung.Settings.from_env({"KRUNG_PROFILE_SET": "full"}).profile_set == "full"
    with pytest.raises(krung.UsageError, match="KRUNG_PROFILE_SET"):
        krung.Settings.from_env({"KRUNG_PROFILE_SET": "everything"})


def test_ncu_profiles_one_calls_launches_and_each_kernel_is_summarised_once(tmp_path):
    count = random.randint(2, 9)
    args = profile.command("/opt/ncu", tmp_path / "v.ncu-rep", launch_count=count - 0.5)
    assert args[args.index("--launch-count") + 1] == str(count)  # CUPTI's mean, rounded up
    assert profile.kernel_filter(None) == ["--launch-count", str(profile.LAUNCH_COUNT)]
    assert profile.kernel_filter(0.0) == ["--launch-count", str(profile.LAUNCH_COUNT)]
    assert profile.kernel_filter(500.0) == ["--launch-count", str(profile.LAUNCH_COUNT)]
    # A call launching a, b, a, c, a: three kernels, each from its first launch.
    durations = [random.randint(1000, 9000) for _ in range(5)]
    launches = [{"kernel": name, "duration_ns": ns}
                for name, ns in zip("abaca", durations, strict=True)]
    kernels = profile.first_per_kernel(launches)
    assert [(k["kernel"], k["launches"], k["duration_ns"]) for k in kernels] == [
        ("a", 3, durations[0]), ("b", 1, durations[1]), ("c", 1, durations[3])]


def test_the_profile_is_asked_for_with_plus_profile():
    from krung.judge.ladder import select

    assert "profile" not in krung.DEFAULT_LADDER and "roofline" in krung.DEFAULT_LADDER
    assert select(None) == list(krung.DEFAULT_LADDER) == select("")
    assert select("+profile") == [*krung.DEFAULT_LADDER[:-1], "profile", "roofline"]
    assert select(["+trace", "+profile"]) == [*select("+profile"), "trace"]
    assert select("correctness,profile,static") == ["static", "correctness", "profile"]
    with pytest.raises(krung.UsageError, match="mix") as mixed:
        select("static,+profile")
    assert "+profile" in mixed.value.hint
    with pytest.raises(krung.UsageError, match="profil"):
        select("+profil")


# An ncu that never ends, and leaves a child behind: the limit must end both.
STAND_IN_NCU = """#!/bin/sh
echo $$ > "{pids}"
sleep 600 &
echo $! >> "{pids}"
wait
"""


def stand_in_ncu(tmp_path, monkeypatch, script: str) -> None:
    """`ncu` on PATH: the script given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").write_text(script)
    (bin_dir / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def ladder_context(tmp_path, scale_problem, version, settings):
    """A judge's context for the good version of the scale problem, its worker started."""
    from krung.judge.candidate import Candidate
    from krung.judge.ladder import Context
    from krung.judge.problem import load_problem
    from krung.judge.solution import read_solution

    solution = read_solution(version("good", GOOD))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    candidate = Candidate("cpu", run_dir, solution.path)
    candidate.start()
    return Context(problem=load_problem(scale_problem), solution=solution, device="cpu",
                   candidate=candidate, settings=settings, seed=random.getrandbits(62),
                   run_dir=run_dir)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_profile_limit_ends_ncu_and_keeps_the_earlier_rungs(tmp_path, monkeypatch,
                                                                 scale_problem, version):
    from krung.judge.ladder import climb

    pids = tmp_path / "ncu.pids"
    stand_in_ncu(tmp_path, monkeypatch, STAND_IN_NCU.format(pids=pids))
    limit = round(random.uniform(2.0, 4.0), 1)
    ctx = ladder_context(tmp_path, scale_problem, version,
                         krung.Settings(profile_timeout_s=limit))
    candidate = ctx.candidate
    sent: list = []
    try:
        climb(ctx, ["static", "compile", "run", "correctness", "benchmark"], sent.append)
        before = [r.to_json() for r in sent]
        assert all(r.ok for r in sent), [r.line() for r in sent]
        ctx.device = "cuda"  # as on a GPU: the rung starts `ncu` from PATH, the stand-in
        start = time.monotonic()
        climb(ctx, ["profile"], sent.append)
        took = time.monotonic() - start
    finally:
        candidate.close()
    rung = sent[-1]
    assert rung.name == "profile" and rung.status is krung.Status.FAILED, rung.line()
    assert rung.error_type == "ProfileTimeout"
    assert f"limit of {limit:g} s while ncu was starting the worker" in rung.error
    assert "KRUNG_PROFILE_TIMEOUT" in rung.hint and "kept their results" in rung.hint
    assert rung.figures["limit_s"] == limit and "start" in rung.figures["steps_s"]
    assert limit <= took <= limit + 5
    # Every earlier rung's result as it was sent, in order, and none rewritten.
    assert [r.to_json() for r in sent[:-1]] == before
    assert [ctx.results[r["name"]].to_json() for r in before] == before
    # ncu and the process it left behind are gone.
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in started)


def test_a_profiler_without_counter_permission_fails_with_the_fix(tmp_path):
    log = tmp_path / "worker-profile.log"
    log.write_text("==PROF== Connected to process 4242\n==ERROR== ERR_NVGPUCTRPERM - The user "
                   "does not have permission to access NVIDIA GPU Performance Counters on the "
                   "target device 0.\n")
    with pytest.raises(RungFailed) as caught:
        _check_permission(log)
    assert caught.value.error_type == "ProfilerPermission"
    assert "ERR_NVGPUCTRPERM" in caught.value.message
    assert "NVreg_RestrictProfilingToAdminUsers=0" in caught.value.hint
    log.write_text("==PROF== Disconnected from process 4242\n")
    _check_permission(log)  # no error, nothing raised


def test_clock_control_setting_is_checked():
    assert krung.Settings.from_env({"KRUNG_PROFILE_CLOCK_CONTROL": "base"}) \
        .profile_clock_control == "base"
    with pytest.raises(krung.UsageError, match="KRUNG_PROFILE_CLOCK_CONTROL"):
        krung.Settings.from_env({"KRUNG_PROFILE_CLOCK_CONTROL": "turbo"})


def test_the_profile_time_limit_setting_is_checked():
    assert krung.Settings().profile_timeout_s == 60.0
    assert krung.Settings.from_env({"KRUNG_PROFILE_TIMEOUT": "25"}).profile_timeout_s == 25.0
    for bad in ("0", "-3", "soon"):
        with pytest.raises(krung.UsageError, match="KRUNG_PROFILE_TIMEOUT"):
            krung.Settings.from_env({"KRUNG_PROFILE_TIMEOUT": bad})


def test_trace_records_become_a_chrome_trace_and_region_figures():
    # Two programs on SMs 3 and 7, two regions each, in ns as the tracer records them.
    launch = {"kernel": "k", "grid": [2], "regions": ["load", "store"], "events": [
        [0, 0, 1_000, 1_400, 3], [0, 1, 1_400, 2_000, 3],
        [1, 0, 1_100, 1_300, 7], [1, 1, 1_300, 2_100, 7]]}
    rows = trace_rung.region_rows(launch, 0)
    assert [(r["region"], r["programs"], r["median_ns"]) for r in rows] == [
        ("load", 2, 300), ("store", 2, 700)]
    assert rows[0]["launch_span_ns"] == 1_100 and rows[0]["max_ns"] == 400
    chrome = json.loads(json.dumps(trace_rung.chrome_trace(launch, 0)))
    events = chrome["traceEvents"]
    assert len(events) == 4 and {e["ph"] for e in events} == {"X"}
    first = events[0]
    assert first == {"name": "load", "ph": "X", "pid": "k", "tid": "SM 3", "ts": 0.0,
                     "dur": 0.4, "args": {"program": 0}}


def test_a_report_read_from_ncus_csv_where_ncu_report_is_missing():
    """Some installs lack extras/python: the summary then comes from ncu's CSV export."""
    import random

    from krung.judge.rungs.profile import ncu as profile

    ns, regs, mhz = random.randint(1000, 90000), random.choice([24, 32, 40]), 1755
    text = (
        "==PROF== Disconnected\n"
        '"ID","Process ID","Kernel Name","gpu__time_duration.sum","launch__registers_per_thread",'
        '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",'
        '"sm__cycles_elapsed.avg.per_second"\n'
        '"","","","ns","register/thread","ratio","ratio","ratio","Hz"\n'
        f'"0","4242","add_kernel","{ns:,}","{regs}","3.5","0.75","1","{mhz * 10**6:,}"\n')
    [kernel] = profile.summarise_csv(text)
    assert kernel["kernel"] == "add_kernel"
    assert kernel["duration_ns"] == ns and kernel["registers"] == regs
    assert kernel["sm_mhz"] == mhz
    assert kernel["top_stalls"] == [{"reason": "long_scoreboard", "cycles_per_issue": 3.5},
                                    {"reason": "wait", "cycles_per_issue": 0.75}]
    assert kernel["findings"] == []


def test_the_case_profiled_is_the_one_furthest_from_the_roofline(tmp_path):
    from krung.judge.device import datasheet_for
    from krung.judge.ladder import Context
    from krung.judge.problem import case_label, load_problem
    from krung.judge.rungs.profile.case import choose_case
    from krung.judge.rungs.roofline.calibration import key_of
    from tests.conftest import PROBLEMS
    from tests.recorded import H200_RECORD

    problem = load_problem(PROBLEMS / "softmax")  # four memory-bound bench cases
    labels = [case_label(c) for c in problem.bench_cases]
    pcts = random.sample([35.0, 52.0, 71.0, 88.0], 4)  # % of the DRAM roofline per case
    speedups = random.sample([0.4, 0.9, 1.3, 2.2], 4)
    rows = []
    for case, pct, speedup in zip(problem.bench_cases, pcts, speedups, strict=True):
        roofline_us = problem.bytes_moved(case) / H200_RECORD["dram_bytes_per_s"] * 1e6
        median = roofline_us / (pct / 100)
        rows.append({"case": case_label(case), "median_us": median, "speedup": speedup,
                     "ref_median_us": median * speedup, "kernels_per_call": 1.0})
    bench = krung.RungResult("benchmark", krung.Status.OK, figures={"per_case": rows})
    env = {"device_name": "NVIDIA H200", "driver": "570.86", "torch": "2.13", "cuda": "12.8"}
    kept = {"key": key_of(env), "record": H200_RECORD, "measured_at": "2026-01-01T00:00:00"}

    def chosen(**changes):
        fields = {"problem": problem, "solution": None, "device": "cuda", "candidate": None,
                  "settings": krung.Settings(), "seed": 7, "run_dir": tmp_path,
                  "results": {"benchmark": bench}, "env": env, "calibrations": [kept],
                  **changes}
        case, why = choose_case(Context(**fields))
        return case_label(case), why

    worst = labels[pcts.index(min(pcts))]
    label, why = chosen()
    assert label == worst, (pcts, why)
    assert why["case_pct_of_roofline"] == pytest.approx(min(pcts), abs=0.05)
    assert why["case_chosen_by"] == "the lowest % of roofline of 4 bench cases (measured " \
                                    "ceilings)"
    # No calibration kept yet: the datasheet's peaks rank the cases (nothing is measured).
    assert datasheet_for("NVIDIA H200") is not None
    label, why = chosen(calibrations=[])
    assert label == worst and "datasheet" in why["case_chosen_by"]
    # A GPU krung knows no figures for: the lowest speedup over the reference.
    label, why = chosen(calibrations=[], env={**env, "device_name": "Some Future GPU"})
    assert label == labels[speedups.index(min(speedups))]
    assert why == {"case_chosen_by": "the lowest speedup over the reference of 4 bench cases "
                                     "(no ceilings known for this GPU)"}
    # No benchmark in the ladder: the first case, and why.
    label, why = chosen(results={})
    assert label == labels[0] and "climb benchmark too" in why["case_chosen_by"]


def test_a_worker_under_ncu_that_dies_before_its_hello_fails_the_rung_not_krung(
        tmp_path, monkeypatch, scale_problem, version):
    """A worker a tool starts while the version's own worker lives may die before its hello
    for what the version holds (the GPU's memory): the profile rung's failure, never krung's
    error (which would be tried again and leave the version without a verdict)."""
    from krung.judge.ladder import climb

    status = random.randint(1, 120)
    stand_in_ncu(tmp_path, monkeypatch,
                 f"#!/bin/sh\necho 'no room for a context' >&2\nexit {status}\n")
    ctx = ladder_context(tmp_path, scale_problem, version, krung.Settings())
    candidate = ctx.candidate
    sent: list = []
    try:
        climb(ctx, ["static", "compile", "run"], sent.append)
        ctx.device = "cuda"  # as on a GPU: the rung starts `ncu` from PATH, the stand-in
        climb(ctx, ["profile"], sent.append)
    finally:
        candidate.close()
    rung = sent[-1]
    assert rung.name == "profile" and rung.status is krung.Status.FAILED, rung.line()
    assert rung.error_type != "InternalError", rung.line()
    assert f"status {status}" in rung.error, rung.line()
