"""The profile rung (Nsight Compute) and the trace rung (krung.tracer) where they can run
here, without a GPU: both skip with the reason, the ncu command profiles only the version's
range, a counter-permission error is explained with the fix, the tracer compiles to timer
reads for sm_90a and away to nothing without a buffer, and a trace's records become a
Chrome trace and per-region figures. On a GPU: tests/test_gpu_profile_trace.py."""

from __future__ import annotations

import json

import pytest

import krung
from krung.judge.rungs import trace as trace_rung
from krung.judge.rungs.profile import _check_permission
from krung.judge.rungs.profile import ncu as profile
from krung.protocol.errors import RungFailed

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


def test_ncu_profiles_only_the_versions_range_with_the_gpus_own_clocks(tmp_path):
    report = tmp_path / "v.ncu-rep"
    args = profile.command("/opt/ncu", report)
    assert args[0] == "/opt/ncu"
    assert args[args.index("--nvtx-include") + 1] == f"{profile.NVTX_RANGE}/"
    assert "--nvtx" in args and args[args.index("--clock-control") + 1] == "none"
    assert args[args.index("--launch-count") + 1] == str(profile.LAUNCH_COUNT)
    assert args[args.index("--export") + 1] == str(report)
    sections = [args[i + 1] for i, a in enumerate(args) if a == "--section"]
    assert sections == list(profile.SECTIONS)
    more = profile.command("/opt/ncu", report, clock_control="base", source_counters=True)
    assert more[more.index("--clock-control") + 1] == "base" and "SourceCounters" in more


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
