"""Versions that break the GPU: each fails cleanly, and the next evaluation works."""

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
