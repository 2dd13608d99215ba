"""On the GPU: versions that break it fail cleanly and the next evaluation works; tensors
cross between the judge and the worker by CUDA IPC as they would through host memory."""

from __future__ import annotations

import textwrap

import pytest

from tests.test_red_team import CHEATS

pytestmark = pytest.mark.gpu

ILLEGAL_ADDRESS = """
import torch
import triton
import triton.language as tl


@triton.jit
def _far_store(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs + (1 << 40), x * 2 + 1, mask=offs < n)  # a terabyte past the end


def kernel(x):
    y = torch.empty_like(x)
    _far_store[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y
"""

SPIN = """
import torch
import triton
import triton.language as tl


@triton.jit
def _spin(flag_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:  # nothing ever sets the flag
        pass


def kernel(x):
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    _spin[(1,)](flag)
    return x * 2 + 1
"""

GOOD = "def kernel(x):\n    return x * 2 + 1\n"


def test_illegal_memory_access_fails_the_rung_and_the_next_run_works(
        krung, scale_problem, version):
    result = krung("run", scale_problem, version("illegal", ILLEGAL_ADDRESS), "--device", "cuda",
                   "--json", timeout=300)
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    print(failed["name"], failed["error"])
    assert "illegal memory access" in failed["error"] or "WorkerCrashed" in failed["error"]
    after = krung("run", scale_problem, version("good", GOOD), "--device", "cuda", "--json",
                  "--rungs", "static,compile,run,correctness")
    assert after.code == 0, after.stdout


def test_a_kernel_that_never_ends_times_out_and_the_next_run_works(
        krung, scale_problem, version):
    env = {"KRUNG_COMPILE_TIMEOUT": "10"}  # the spin never ends: no need to wait long
    result = krung("run", scale_problem, version("spin", SPIN), "--device", "cuda", "--json",
                   "--rungs", "static,compile", env=env, timeout=300)
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    print(failed["name"], failed["error"])
    assert failed["error_type"] == "Timeout"
    after = krung("run", scale_problem, version("good", GOOD), "--device", "cuda", "--json",
                  "--rungs", "static,compile,run,correctness")
    assert after.code == 0, after.stdout


def test_tensors_by_cuda_ipc_and_through_host_memory_give_the_same_verdict(
        krung, scale_problem, version):
    path = version("good", GOOD)
    figures = {}
    for ipc in ("1", "0"):
        result = krung("run", scale_problem, path, "--device", "cuda", "--seed", "7", "--json",
                       "--rungs", "correctness,benchmark", env={"KRUNG_CUDA_IPC": ipc})
        assert result.code == 0, result.stdout + result.stderr
        # the verdict's figures, not how long each case took
        figures[ipc] = [{k: v for k, v in row.items() if k != "seconds"}
                        for row in result.json()["rungs"][0]["figures"]["per_case"]]
    assert figures["1"] == figures["0"]


# y = 2x + 1 at a size where krung's own copies show: 512 MiB of float32 per tensor.
LARGE = '''
import torch

def reference(x):
    return x * 2 + 1

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], generator=g, device=device),)

test_cases = [{"n": 17, "dtype": "float32"}, {"n": (1 << 27) + 3, "dtype": "float32"}]
bench_cases = [{"n": 1 << 20, "dtype": "float32"}]

def flops(case):
    return 2 * case["n"]

def bytes_moved(case):
    return 8 * case["n"]
'''


def test_at_large_sizes_judge_and_worker_each_hold_a_few_copies_of_the_data(
        krung, tmp_path, version):
    """A checked call of a 512 MiB input and output: the judge holds the inputs, the reference
    and what comes back (outputs, inputs after), the worker what it was sent and what the
    version made; neither holds the previous call's beside the next one's, and what the worker
    sends back is shared in place rather than copied (KernelBench's 6 GiB tensors ran an
    80 GB card out of memory with one problem on it: 31 GiB in the judge, 43 in the worker)."""
    (tmp_path / "large").mkdir()
    (tmp_path / "large" / "problem.py").write_text(LARGE)
    result = krung("run", tmp_path / "large", version("good", GOOD), "--device", "cuda",
                   "--rungs", "static,compile,run,correctness", "--json")
    assert result.code == 0, result.stdout + result.stderr
    run = result.json()
    correctness = next(r for r in run["rungs"] if r["name"] == "correctness")
    largest = max(int(row["case"].split("n=")[1].split(",")[0])  # an unseen case may be larger
                  for row in correctness["figures"]["per_case"])
    mib = largest * 4 / 2**20
    env = run["env"]
    judge, worker = env["judge_device_peak_mib"] / mib, env["worker_device_peak_mib"] / mib
    print(f"peaks in copies of the largest input ({mib:.0f} MiB): judge {judge:.2f}, "
          f"worker {worker:.2f}")
    assert judge <= 5.5 and worker <= 5, env


MANY_LAUNCHES = """
def kernel(x):
    y = x
    for _ in range(16):
        y = y * 1.0
    return y * 2 + 1
"""


def test_timing_is_cupti_device_time_and_flags_launch_bound_versions(
        krung, scale_problem, version):
    result = krung("run", scale_problem, version("many", MANY_LAUNCHES), "--device", "cuda",
                   "--json", "--rungs", "benchmark")
    assert result.code == 0, result.stdout + result.stderr
    case = result.json()["rungs"][0]["figures"]["per_case"][0]
    print(case)
    assert case["timer"] == "cupti"
    assert case["kernels_per_call"] == 18
    assert case["host_median_us"] > case["median_us"]
    assert case["launch_bound"] is True
    assert case["sm_mhz"][1] > 0
    assert 300 < case["sm_mhz_timed"] < 1.2 * max(case["sm_mhz"])  # from the timer's markers


SIDE_STREAM_UNJOINED = """
import torch
def kernel(x):
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000)  # about a millisecond: the caller reads y before this
        torch.mul(x, 2, out=y)
        y.add_(1)
    return y  # never joined: the caller's stream does not wait for `side`
"""

# Joined, and without the sleep (its spin kernel is the timer's marker between samples); the
# clone runs on the caller's stream, so the call's work is on two streams.
SIDE_STREAM_JOINED = SIDE_STREAM_UNJOINED.replace(
    "    return y  # never joined: the caller's stream does not wait for `side`",
    "    torch.cuda.current_stream().wait_stream(side)\n    return y.clone()").replace(
    "        torch.cuda._sleep(2_000_000)  # about a millisecond: the caller reads y before "
    "this\n", "")

PARTIAL_WRITE = """
import torch
def kernel(x):
    y = torch.empty_like(x)
    half = x.numel() // 2
    y[:half] = x[:half] * 2 + 1
    return y
"""

DEVICE_OOM = """
import torch
def kernel(x):
    return torch.empty(1 << 50, dtype=torch.uint8, device=x.device)
"""

OUT_OF_BOUNDS = """
import torch
import triton
import triton.language as tl


@triton.jit
def _past_the_end(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n + 8, other=0.0)  # reads 8 elements past the end
    tl.store(y_ptr + offs, x * 2 + 1, mask=offs < n)


def kernel(x):
    y = torch.empty_like(x)
    _past_the_end[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y.clone()
"""


# Unwritten elements read as the NaN the memory was poisoned with: NonFinite in the run rung
# (seen on the H200), or Mismatch where they happen to be finite.
@pytest.mark.parametrize("name, source, rung, error_types", [
    ("unjoined", SIDE_STREAM_UNJOINED, ("run", "correctness"), ("NonFinite", "Mismatch")),
    ("partial", PARTIAL_WRITE, ("run", "correctness"), ("NonFinite", "Mismatch")),
    ("oom", DEVICE_OOM, ("run",), ("OutOfMemoryError",)),
])
def test_gpu_cheats_and_faults_are_caught(krung, scale_problem, version, name, source, rung,
                                          error_types):
    result = krung("run", scale_problem, version(name, source), "--device", "cuda", "--json",
                   "--rungs", "static,compile,run,correctness")
    assert result.code == 1, result.stdout + result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    print(name, failed["name"], failed["error"])
    assert failed["name"] in rung
    assert failed["error_type"] in error_types


def test_a_side_stream_that_is_joined_passes(krung, scale_problem, version):
    result = krung("run", scale_problem, version("joined", SIDE_STREAM_JOINED), "--device",
                   "cuda", "--json", "--rungs",
                   "static,compile,run,correctness,determinism,benchmark")
    assert result.code == 0, result.stdout + result.stderr
    # CUPTI's census sees the call's work on both streams.
    bench = next(r for r in result.json()["rungs"] if r["name"] == "benchmark")
    assert all(row.get("streams", 1) >= 2 for row in bench["figures"]["per_case"]), bench


def test_sanitize_reports_an_out_of_bounds_store(krung, scale_problem, version):
    result = krung("run", scale_problem, version("oob", OUT_OF_BOUNDS), "--device", "cuda",
                   "--json", "--rungs", "correctness,determinism", env={"KRUNG_SANITIZE": "1"},
                   timeout=600)
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    print(rungs["determinism"]["error"])
    assert rungs["correctness"]["status"] == "ok"  # what it reads past the end is not stored
    assert rungs["determinism"]["error_type"] == "SanitizerError"
    assert "memcheck" in rungs["determinism"]["error"]


IN_BOUNDS = OUT_OF_BOUNDS.replace("mask=offs < n + 8, other=0.0)  # reads 8 elements past the end",
                                  "mask=offs < n, other=0.0)")

# Raises only where the sanitizer's workers run (they switch torch's caching allocator off).
RAISES_UNDER_THE_TOOL = IN_BOUNDS.replace("def kernel(x):\n", """def kernel(x):
    import os
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        raise RuntimeError("refusing to run under a sanitizer")
""")


@pytest.mark.parametrize("name, source, error_type", [
    ("clean", IN_BOUNDS, None),
    ("shy", RAISES_UNDER_THE_TOOL, "SanitizerRunFailed"),
])
def test_sanitize_passes_a_clean_version_and_fails_one_that_does_not_run_under_it(
        krung, scale_problem, version, name, source, error_type):
    result = krung("run", scale_problem, version(name, source), "--device", "cuda", "--json",
                   "--rungs", "correctness,determinism", env={"KRUNG_SANITIZE": "1"},
                   timeout=600)
    determinism = {r["name"]: r for r in result.json()["rungs"]}["determinism"]
    print(name, determinism["status"], determinism["error"], determinism["figures"])
    assert determinism["error_type"] == error_type
    if error_type is None:
        assert determinism["figures"]["memcheck_errors"] == 0


# the red team's cheat, on the GPU
SAMPLED_VALUES_CACHE = textwrap.dedent(CHEATS["memoises_sampled_values"][0])


def test_a_cache_keyed_on_sampled_values_fails_the_timed_check(krung, scale_problem, version):
    """A few elements of every input set change before each timed call (outside the timed
    region, told apart from the call's kernels by a marker of their own): the cache replays
    stale outputs, and an honest version's figures keep the call's kernels only."""
    rungs = "static,compile,run,correctness,benchmark"
    on = {"KRUNG_TIMED_INPUT_CHANGES": "on"}  # the default; said here, as this test is about it
    result = krung("run", scale_problem, version("sampled", SAMPLED_VALUES_CACHE), "--device",
                   "cuda", "--json", "--rungs", rungs, env=on)
    assert result.code == 1, result.stdout + result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    assert (failed["name"], failed["error_type"]) == ("benchmark", "TimedMismatch"), failed
    result = krung("run", scale_problem, version("good", GOOD), "--device", "cuda", "--json",
                   "--rungs", rungs, env=on)
    assert result.code == 0, result.stdout + result.stderr
    case = result.json()["rungs"][-1]["figures"]["per_case"][0]
    assert case["timer"] == "cupti" and case["kernels_per_call"] <= 2, case  # mul, add


# A row sum of a 1 GiB float32 input: the output is small, so the input is what is held.
LARGE_IN_SMALL_OUT = '''
import torch

def reference(x):
    return x.sum(dim=1)

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["rows"], case["cols"], generator=g, device=device),)

def flops(case):
    return case["rows"] * case["cols"]

def bytes_moved(case):
    return 4 * case["rows"] * (case["cols"] + 1)

test_cases = [{"rows": 3, "cols": 17, "dtype": "float32"}]
bench_cases = [{"rows": 1 << 14, "cols": 1 << 14, "dtype": "float32"}]
'''


def test_the_benchmarks_new_values_land_in_the_sets_the_worker_holds(krung, tmp_path, version):
    """The benchmark's second round sends new values for the input sets the worker holds
    (same addresses, new data): received by IPC straight into them, the worker never holds a
    second copy. Received beside them, a 16 GiB input took 32 GiB in the worker, and
    45_Average_Pooling_2D ran an 80 GB card out of memory alone."""
    (tmp_path / "rowsum").mkdir()
    (tmp_path / "rowsum" / "problem.py").write_text(LARGE_IN_SMALL_OUT)
    solution = version("rowsum", "def kernel(x):\n    return x.sum(dim=1)\n")
    result = krung("run", tmp_path / "rowsum", solution, "--device", "cuda",
                   "--rungs", "static,compile,benchmark", "--json", timeout=300)
    assert result.code == 0, result.stdout + result.stderr
    env = result.json()["env"]
    copies = env["worker_device_peak_mib"] / 1024  # the input is 1 GiB
    print(f"worker peak: {copies:.2f} copies of the input; judge {env['judge_device_peak_mib']}")
    assert copies < 1.5, env


# The same row sum, its one checked case its bench case and three rows more (1 GiB: a size
# that is not a power of two, as krung asks of a problem's checked cases).
LARGE_CHECKED = LARGE_IN_SMALL_OUT.replace(
    'test_cases = [{"rows": 3, "cols": 17, "dtype": "float32"}]',
    'test_cases = [{"rows": (1 << 14) + 3, "cols": 1 << 14, "dtype": "float32"}]')


def test_the_judge_hands_back_every_large_block_it_freed(krung, tmp_path, version):
    """The judge's long-lived scratch (cuBLAS's workspaces, the L2 flush buffer) is allocated
    before any problem's data: made after a 1 GiB input was freed, it would sit in that
    block and keep the whole segment from the driver, beside every later case."""
    (tmp_path / "rowsum").mkdir()
    (tmp_path / "rowsum" / "problem.py").write_text(LARGE_CHECKED)
    solution = version("rowsum", "def kernel(x):\n    return x.sum(dim=1)\n")
    result = krung("run", tmp_path / "rowsum", solution, "--device", "cuda", "--rungs",
                   "static,compile,run,correctness,benchmark", "--json", timeout=300)
    assert result.code == 0, result.stdout + result.stderr
    env = result.json()["env"]
    print(f"judge: peak {env['judge_device_peak_mib']} MiB, pinned "
          f"{env['judge_device_pinned_mib']} MiB; worker peak {env['worker_device_peak_mib']}")
    assert env["judge_device_pinned_mib"] < 256, env
