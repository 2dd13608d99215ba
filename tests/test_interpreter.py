"""krung's bfloat16 fix for Triton's interpreter: loads, stores, arithmetic, tl.dot and atomics
on bf16 are right, under every Triton the support matrix tests (3.6 and the newest)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.newest  # also with the newest packages (make test-newest)

SCRIPT = r'''
import torch, triton, triton.language as tl
from krung.worker.interpreter import fix_bfloat16
fix_bfloat16()

@triton.jit
def fma(x, y, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    a = tl.load(x + i, mask=m)
    b = tl.load(y + i, mask=m)
    tl.store(o + i, a * b + a, mask=m)

@triton.jit
def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BK)):  # a scalar as an index: numpy 2.4 refused it
        k = step * BK
        A = tl.load(a + rm[:, None] * K + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        B = tl.load(b + (k + rk)[:, None] * N + rn[None, :],
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(A, B, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))

g = torch.Generator().manual_seed(int(torch.seed() % 2**31))
n = 1000
x = torch.randn(n, generator=g).bfloat16()
y = torch.randn(n, generator=g).bfloat16()
o = torch.empty_like(x)
fma[(4,)](x, y, o, n, 256)
print("fma", (o.float() - (x * y + x).float()).abs().max().item())

@triton.jit
def affine(x, o, n, B: tl.constexpr):  # a Python scalar beside bf16: builder.get_bf16 (3.6)
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o + i, tl.load(x + i, mask=i < n) * 3 + 1, mask=i < n)

affine[(4,)](x, o, n, 256)
print("scalar", (o.float() - (x * 3 + 1).float()).abs().max().item())

M, N, K = 200, 129, 300
a = torch.randn(M, K, generator=g).bfloat16()
b = torch.randn(K, N, generator=g).bfloat16()
c = torch.empty(M, N, dtype=torch.bfloat16)
mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, 32, 32, 32)
ref = a.float() @ b.float()
print("dot", ((c.float() - ref).abs() / (ref.abs() + 1)).max().item())

@triton.jit
def scatter_add(x, index, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    v = tl.load(x + i, mask=m)
    tl.atomic_add(o + tl.load(index + i, mask=m), v, mask=m)

bins = 7  # many lanes of one program hit one bin: every addition must count
index = torch.randint(0, bins, (n,), generator=g, dtype=torch.int32)
sums = torch.zeros(bins, dtype=torch.bfloat16)
scatter_add[(4,)](x, index, sums, n, 256)
want = torch.zeros(bins, dtype=torch.bfloat16)  # lane by lane, each sum rounded to bf16
for value, bin in zip(x, index.tolist()):
    want[bin] = (want[bin].float() + value.float()).bfloat16()
print("atomic_add", (sums.float() - want.float()).abs().max().item())
'''


def test_bf16_arithmetic_and_dot_are_right_under_the_interpreter():
    pytest.importorskip("triton")
    pytest.importorskip("ml_dtypes")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    errors = dict(line.split() for line in done.stdout.splitlines())
    # a*b+a in bf16 rounds at most twice: within 2 ulps of the bf16 result.
    assert float(errors["fma"]) < 0.1
    assert float(errors["scalar"]) < 0.1
    # bf16 inputs, fp32 accumulation, one rounding to bf16: relative error below 2^-8.
    assert float(errors["dot"]) < 2 ** -8
    # One program's lanes hit one bin many times: each addition counts, rounded to bf16, in
    # lane order (the interpreter runs programs one after another), so the sums are exact.
    assert float(errors["atomic_add"]) == 0.0


AUTOTUNED = r'''
import torch, triton, triton.language as tl
from krung.worker import launches
from krung.worker.interpreter import fix_autotune
fix_autotune()
log = launches.install()

@triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])
@triton.jit
def inc(x, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)

x, o = torch.randn(40), torch.empty(40)
for n in (40, 40, 40, 24, 40, 24):  # two keys, each tuned once, then called as timed calls are
    inc[lambda meta: (triton.cdiv(n, meta["B"]),)](x, o, n)
print("timed_calls_kept", len(log.recent))
print("keys", len(log.autotune))
print("tuned", sum("tune_s" in r for r in log.autotune.values()))
# a grid that reads a meta-parameter gets the launch's keyword arguments, as in Triton
print("unknown_grids", sum(r["grid"] is None for r in log.described.values()))
log.recording = True  # what the worker does while it tunes before timing
inc[(2,)](x, o, 40)
print("recorded", len(log.recent))
'''


def test_the_autotune_hook_keeps_no_record_of_timed_calls():
    """Only the worker's tune-before-timing step records its calls (krung.worker.launches);
    a timed call of a kernel already noted costs a set lookup, not a record."""
    pytest.importorskip("triton")
    done = subprocess.run([sys.executable, "-c", AUTOTUNED], capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1"), timeout=300)
    assert done.returncode == 0, done.stderr
    figures = {k: int(v) for k, v in (line.split() for line in done.stdout.splitlines())}
    assert figures == {"timed_calls_kept": 0, "keys": 2, "tuned": 2, "unknown_grids": 0,
                       "recorded": 1}


LIBDEVICE = r"""
import torch, triton, triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cuda_libdevice
from triton.language.extra.libdevice import erf
from krung.worker.interpreter import fix_interpreter
fix_interpreter()

@triton.jit
def math(x_ptr, t_ptr, e_ptr, r_ptr, p_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(t_ptr + offs, libdevice.tanh(x).to(t_ptr.dtype.element_ty), mask=mask)
    tl.store(e_ptr + offs, erf(x).to(e_ptr.dtype.element_ty), mask=mask)
    tl.store(r_ptr + offs, cuda_libdevice.rsqrt(tl.abs(x) + 0.5), mask=mask)
    tl.store(p_ptr + offs, libdevice.pow(tl.abs(x) + 0.5, 1.5), mask=mask)

g = torch.Generator().manual_seed(int(torch.seed() % 2**31))
for dtype in (torch.float32, torch.bfloat16):
    n = 1000 + int(torch.randint(0, 97, (1,), generator=g))
    x = (2 * torch.randn(n, generator=g)).to(dtype)
    t, e = torch.empty_like(x), torch.empty_like(x)
    r, p = torch.empty(n), torch.empty(n)
    math[(triton.cdiv(n, 256),)](x, t, e, r, p, n, BLOCK=256)
    xf = x.float()
    want = {"tanh": torch.tanh(xf).to(dtype), "erf": torch.erf(xf).to(dtype),
            "rsqrt": torch.rsqrt(xf.abs() + 0.5), "pow": (xf.abs() + 0.5) ** 1.5}
    for name, got in zip(want, (t, e, r, p)):
        error = (got.float() - want[name].float()).abs() / want[name].float().abs().clamp(min=1e-3)
        print(f"{name}_{str(dtype)[6:]}", error.max().item())
"""


def test_libdevice_functions_run_under_the_interpreter_as_the_gpu_computes_them():
    """libdevice through the stub module, the CUDA module and a name imported from it,
    on fp32 and bf16 data, against torch on fresh inputs."""
    pytest.importorskip("triton")
    done = subprocess.run([sys.executable, "-c", LIBDEVICE], capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1"), timeout=300)
    assert done.returncode == 0, done.stderr
    errors = {k: float(v) for k, v in (line.split() for line in done.stdout.splitlines())}
    assert len(errors) == 8, errors
    for name, error in errors.items():  # relative: fp32 within a few ulps, bf16 within one
        assert error <= (5e-7 if name.endswith("float32") else 2 ** -8), (name, error)


LIBDEVICE_ADD = """
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    one = libdevice.exp2(x * 0.0)  # 1.0, through libdevice
    tl.store(out_ptr + offs, libdevice.fma(x, one, tl.load(y_ptr + offs, mask=mask)),
             mask=mask)


def kernel(a, b):
    out = torch.empty_like(a)
    add_kernel[(triton.cdiv(a.numel(), 256),)](a, b, out, a.numel(), BLOCK=256)
    return out
"""


def test_a_version_calling_libdevice_passes_on_the_cpu_unchanged(krung, version):
    result = krung("run", "vector_add", version("fma", LIBDEVICE_ADD), "--rungs",
                   "static,compile,run,correctness", "--json")
    assert result.code == 0, result.stdout + result.stderr
    assert [r["status"] for r in result.json()["rungs"]] == ["ok"] * 4


def test_a_libdevice_function_without_a_counterpart_names_itself_and_what_to_use():
    from krung.worker.explain import INTERPRETER_HINTS
    from krung.worker.interpreter import NO_COUNTERPART, function_for

    assert function_for("__nv_byte_perm") is None
    message = NO_COUNTERPART.format(symbol="__nv_byte_perm")
    assert any(needle in message for needle, _ in INTERPRETER_HINTS)
    assert function_for("__nv_fast_expf") is not None and function_for("__nv_tanhf")
