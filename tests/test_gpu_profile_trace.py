"""On the GPU: the profile rung against Nsight Compute's own CSV for the same report; the
case furthest from the roofline profiled, each kernel once, within the time limit, and only
its roofline limiter reading the counters; the limit
hit by the real ncu; a traced kernel whose regions add up to its measured time, and artifacts
taken from the kernels the GPU compiled."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest

import krung
from krung.judge.rungs.profile import ncu as profile
from tests.conftest import GPUMODE, KERNELBENCH, PROBLEMS

pytestmark = pytest.mark.gpu

COMPARED = {  # summary figure -> ncu metric, as ncu --csv prints it for the same report
    "duration_ns": "gpu__time_duration.sum",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "compute_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "registers": "launch__registers_per_thread",
}


def ncu_csv(ncu: str, report: str) -> list[dict[str, str]]:
    done = subprocess.run([ncu, "--import", report, "--csv", "--page", "raw",
                           "--print-units", "base", "--metrics", ",".join(COMPARED.values())],
                          capture_output=True, text=True, timeout=300, check=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return [r for r in rows if r.get("ID", "").strip().isdigit()]  # skip the units row


def number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.ncu
@pytest.mark.parametrize("problem", ["vector_add", "softmax"])
def test_profile_figures_match_ncus_own_csv(store, problem):
    ncu = profile.find_ncu()
    if ncu is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    solution = next((PROBLEMS / problem / "solutions").glob("triton*.py"))
    run = krung.evaluate(problem, solution, store=store, device="cuda",
                         rungs="static,compile,run,correctness,profile")
    rung = run.rung("profile")
    assert rung.ok, rung.line() + "\n" + (rung.hint or "") + "\n" + (rung.details or "")
    figures = rung.figures
    kernels = figures["per_kernel"]
    print(json.dumps(figures, indent=1)[:4000])
    assert figures["kernels"] == len(kernels) >= 1
    assert figures["launches_profiled"] == sum(k["launches"] for k in kernels)
    assert all("krung" not in k["kernel"] for k in kernels)  # only the version's kernels
    for kernel in kernels:
        assert kernel["duration_ns"] > 0 and kernel["dram_read_bytes"] > 0
        assert 0 <= kernel["compute_pct"] <= 100 and 0 <= kernel["memory_pct"] <= 100
        assert 0 < kernel["achieved_occupancy_pct"] <= kernel["theoretical_occupancy_pct"] + 1
        assert kernel["top_stalls"] and all(s["cycles_per_issue"] > 0
                                            for s in kernel["top_stalls"])
        assert isinstance(kernel["findings"], list)
    report = store.parent / "runs" / run.run_id / figures["report"]
    assert report.is_file()
    rows = ncu_csv(ncu, str(report))
    assert len(rows) == figures["launches_profiled"]
    first = {}  # the first launch of each kernel, as the rung summarises it
    for row in rows:
        first.setdefault(row["Kernel Name"], row)
    assert list(first) == [k["kernel"] for k in kernels]
    for kernel, row in zip(kernels, first.values(), strict=True):
        for key, metric in COMPARED.items():
            assert kernel[key] == pytest.approx(number(row[metric]), rel=2e-3, abs=0.01), \
                (key, row)


@pytest.mark.ncu
def test_the_worst_case_is_profiled_each_kernel_once_within_the_limit(store):
    if profile.find_ncu() is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    krung.calibrate(store=store)  # kept: the profile ranks the cases with these ceilings
    solution = PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py"
    run = krung.evaluate("softmax", solution, store=store, device="cuda", rungs="+profile")
    rung, roofline = run.rung("profile"), run.rung("roofline")
    assert [r.name for r in run.rungs] == [*krung.DEFAULT_LADDER[:-1], "profile", "roofline"]
    assert rung.ok, rung.line() + "\n" + (rung.hint or "") + "\n" + (rung.details or "")
    figures = rung.figures
    print(json.dumps({k: v for k, v in figures.items() if k != "per_kernel"}, indent=1))
    print(f"profile rung {rung.duration_s:.1f} s")
    assert roofline.ok and figures["case"] == roofline.figures["worst_case"]
    for row in roofline.figures["per_case"]:  # only the profiled case's limiter reads counters
        if row["case"] == figures["case"]:
            assert row["profiled"] and "profile of this case (ncu" in row["limiter"]
        elif row["verdict"] != "at-roofline":  # a case at the roofline needs no counters
            assert f"not profiled (the profile rung ran on case {figures['case']})" in \
                row["limiter"]
    assert "measured ceilings" in figures["case_chosen_by"]
    worst = min(r["pct"] for r in roofline.figures["per_case"])
    assert figures["case_pct_of_roofline"] == pytest.approx(worst, abs=0.06)
    names = [k["kernel"] for k in figures["per_kernel"]]
    assert len(names) == len(set(names)) >= 1 and figures["sections"] == "fast"
    limit = krung.Settings().profile_timeout_s
    assert rung.duration_s <= limit + 2 and sum(figures["steps_s"].values()) <= limit
    assert set(figures["steps_s"]) == {"start", "load", "inputs", "call", "report", "read"}
    log = (store.parent / "runs" / run.run_id / "worker-profile.log").read_text()
    assert "External init callback" not in log  # no CUPTI of our own beside ncu's


THRICE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n).to(tl.float32)
    tl.store(y_ptr + offs, x * a + b, mask=offs < n)


def affine(x, a, b, dtype=torch.float32):
    y = torch.empty(x.shape, dtype=dtype, device=x.device)
    affine_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), a, b, BLOCK=1024)
    return y


def kernel(x):  # 2x + 1 in three launches of one kernel, rounded to x's dtype once
    return affine(affine(affine(x, 2.0, 0.0), 1.0, 0.5), 1.0, 0.5, x.dtype)
'''


@pytest.mark.ncu
def test_a_kernel_launched_three_times_a_call_is_summarised_once(store, scale_problem, version):
    if profile.find_ncu() is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    run = krung.evaluate(scale_problem, version("thrice", THRICE), store=store, device="cuda",
                         rungs="static,compile,run,correctness,benchmark,profile")
    rung = run.rung("profile")
    assert rung.ok, rung.line() + "\n" + (rung.details or "")
    assert run.rung("benchmark").figures["per_case"][0]["kernels_per_call"] == 3
    [kernel] = rung.figures["per_kernel"]
    assert kernel["kernel"].startswith("affine_kernel") and kernel["launches"] == 3
    assert rung.figures["launches_profiled"] == 3


@pytest.mark.ncu
def test_the_real_ncu_past_the_limit_fails_the_rung_and_keeps_the_benchmark(store):
    if profile.find_ncu() is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    solution = PROBLEMS / "vector_add" / "solutions" / "triton_blocked.py"
    settings = krung.Settings.from_env().replace(profile_timeout_s=1.0)
    run = krung.evaluate("vector_add", solution, store=store, device="cuda", settings=settings,
                         rungs="static,compile,run,correctness,benchmark,profile")
    rung = run.rung("profile")
    assert rung.error_type == "ProfileTimeout", rung.line()
    assert rung.duration_s <= 1.0 + 5
    assert run.rung("benchmark").ok and run.rung("benchmark").figures["per_case"]
    db = krung.Store(store)
    try:  # as recorded: the benchmark kept
        assert db.get(run.run_id).rung("benchmark").to_json() == \
            run.rung("benchmark").to_json()
    finally:
        db.close()


TRACED = '''
import torch
import triton
import triton.language as tl

import krung.tracer as kt

PROGRAMS = 64  # fewer than the SMs: each program has an SM to itself, so a region's time is
               # its own work, not its wait behind other programs' warps on a shared SM


@triton.jit
def busy_kernel(x_ptr, y_ptr, n, trace, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    kt.start(trace, 0)
    for block in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        acc = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        for _ in range(ITERS):
            acc = acc * 0.999 + 0.001
        tl.store(y_ptr + offs, acc, mask=offs < n)
    kt.stop(trace, 0)
    kt.start(trace, 1)
    for block in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        acc = tl.load(y_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        for _ in range(2 * ITERS):
            acc = acc * 0.999 + 0.001
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        # y = 2x + 1 after the work; acc (near 1) decides nothing but keeps the loop alive
        tl.store(y_ptr + offs, tl.where(acc == 12345.5, acc, x * 2 + 1), mask=offs < n)
    kt.stop(trace, 1)


def kernel(x):
    y = torch.empty_like(x)
    grid = (PROGRAMS,)
    busy_kernel[grid](x, y, x.numel(), kt.buffer(grid, ["first", "second"], "busy_kernel"),
                      BLOCK=1024, ITERS=4000, num_warps=4)
    return y
'''


def test_traced_regions_add_up_to_the_kernel_time(store, scale_problem, version):
    run = krung.evaluate(scale_problem, version("traced", TRACED), store=store, device="cuda",
                         rungs="static,compile,run,trace")
    rung = run.rung("trace")
    assert rung.ok, "\n".join(r.line() for r in run.rungs) + (rung.details or "")
    figures = rung.figures
    print(json.dumps(figures, indent=1))
    regions = {r["region"]: r for r in figures["per_region"]}
    assert set(regions) == {"first", "second"}
    assert all(r["programs"] == 64 for r in regions.values())
    # The second region does twice the work of the first.
    assert regions["second"]["median_ns"] == pytest.approx(2 * regions["first"]["median_ns"],
                                                           rel=0.35)
    # Every program runs at once on its own SM, so the regions' medians add up to the
    # launch's span, and the span is the kernel's time inside the call's event time.
    span_ns = regions["first"]["launch_span_ns"]
    assert regions["first"]["median_ns"] + regions["second"]["median_ns"] == \
        pytest.approx(span_ns, rel=0.25)
    assert 0.5 * figures["call_us"] <= span_ns / 1e3 <= 1.05 * figures["call_us"]
    trace = json.loads((store.parent / "runs" / run.run_id / figures["files"][0]).read_text())
    assert len(trace["traceEvents"]) == 2 * 64
    assert all(e["ph"] == "X" and e["dur"] > 0 for e in trace["traceEvents"])


def test_artifacts_on_the_gpu_are_what_it_compiled(store):
    solution = PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py"
    run = krung.evaluate("softmax", solution, store=store, device="cuda",
                         rungs="static,compile,run,correctness,artifacts")
    rung = run.rung("artifacts")
    assert rung.ok, rung.line() + (rung.details or "")
    assert rung.figures["source"] == "kernels the GPU ran"
    assert rung.figures["arch"] == "sm_90a"
    folder = store.parent / "runs" / run.run_id
    for row in rung.figures["per_kernel"]:
        assert {"ttir", "ttgir", "llir", "ptx", "cubin", "sass"} <= set(row["files"])
        record = json.loads((folder / "artifacts" / row["kernel"] /
                             f"{row['specialisation']}.json").read_text())
        assert record["source"] == "gpu" and record["launches"] >= 1
        if record.get("n_regs"):  # what the driver loaded, against what krung parsed
            assert row["registers"] == record["n_regs"]


@pytest.mark.ncu
@pytest.mark.parametrize("problem, version", [
    # KernelBench: the entry is ModelNew, not kernel(); the inputs come from get_inputs()
    (KERNELBENCH / "1_ReLU.py", KERNELBENCH / "solutions" / "1_ReLU.py"),
    # GPU MODE: the data is one nested tuple; the version imports task.py from its folder
    (GPUMODE / "vectoradd_py", GPUMODE / "vectoradd_py" / "submission.py"),
])
def test_profile_loads_the_problems_entry_and_nested_inputs(krung, problem, version):
    if profile.find_ncu() is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    result = krung("run", problem, version, "--device", "cuda", "--rungs",
                   "static,compile,run,correctness,profile", "--json")
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    rung = rungs["profile"]
    assert rung["status"] == "ok", json.dumps(rung, indent=1)[:4000]
    assert rung["figures"]["kernels"] >= 1
    assert all(k["duration_ns"] > 0 for k in rung["figures"]["per_kernel"])
