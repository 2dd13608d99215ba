"""On the GPU: versions that break it fail cleanly and the next evaluation works; tensors
cross between the judge and the worker by CUDA IPC as they would through host memory."""

from __future__ import annotations

import pytest

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
    after = krung("run", scale_problem, version("good", GOOD), "--device", "cuda", "--json")
    assert after.code == 0, after.stdout


def test_a_kernel_that_never_ends_times_out_and_the_next_run_works(
        krung, scale_problem, version):
    env = {"KRUNG_COMPILE_TIMEOUT": "30"}
    result = krung("run", scale_problem, version("spin", SPIN), "--device", "cuda", "--json",
                   env=env, timeout=300)
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    print(failed["name"], failed["error"])
    assert failed["error_type"] == "Timeout"
    after = krung("run", scale_problem, version("good", GOOD), "--device", "cuda", "--json")
    assert after.code == 0, after.stdout


def test_tensors_by_cuda_ipc_and_through_host_memory_give_the_same_verdict(
        krung, scale_problem, version):
    path = version("good", GOOD)
    figures = {}
    for ipc in ("1", "0"):
        result = krung("run", scale_problem, path, "--device", "cuda", "--seed", "7", "--json",
                       "--rungs", "correctness,benchmark", env={"KRUNG_CUDA_IPC": ipc})
        assert result.code == 0, result.stdout + result.stderr
        figures[ipc] = result.json()["rungs"][0]["figures"]["per_case"]
    assert figures["1"] == figures["0"]


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
