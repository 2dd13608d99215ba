"""Delegation in every format (issue 21, item 3): a KernelBench problem states no policy in
its own file, so the run's options (`--forbid-ops`) and a sidecar beside it
(`<stem>.krung.yml`) state it; every run reports whether the version launched a kernel of
its own (`delegated`). Real subprocesses on the CPU, Triton under its interpreter."""

from __future__ import annotations

import random

import pytest

from krung.host import options
from krung.judge.problem.policy import Policy, apply_policy, read_sidecar, sidecar_path
from krung.protocol.errors import ProblemError, UsageError
from krung.protocol.settings import Settings
from tests.conftest import PROBLEMS, write

RUNGS = "static,compile,run,correctness"

KERNELBENCH_MATMUL = '''
"""C = A @ B for small matrices (the task's prose says: no torch.matmul)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 37
K = 29
N = 23


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''

TORCH_MM = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.mm(A, B)
'''

AT_OPERATOR = '''
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return A @ B
'''

TRITON_MATMUL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK)):
        ks = k * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(a + rows[:, None] * K + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        y = tl.load(b + ks[:, None] * N + cols[None, :],
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc, input_precision="ieee")
    tl.store(c + rows[:, None] * N + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), dtype=A.dtype, device=A.device)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        matmul_kernel[grid](A, B, C, M, N, K, BLOCK=16)
        return C
'''


@pytest.fixture
def matmul(tmp_path):
    return write(tmp_path / "kb" / "1_Small_matmul.py", KERNELBENCH_MATMUL)


def _rungs(result) -> dict:
    assert result.stdout, result.stderr
    return {r["name"]: r for r in result.json()["rungs"]}


def test_a_torch_version_is_reported_delegated_and_passes_without_a_policy(krung, matmul,
                                                                           version):
    result = krung("run", matmul, version("torch_mm", TORCH_MM), "--json", "--rungs", RUNGS)
    correctness = _rungs(result)["correctness"]
    assert correctness["status"] == "ok", correctness
    figures = correctness["figures"]
    assert figures["delegated"] is True and figures["own_kernels"] == []
    assert all(row["delegated"] for row in figures["per_case"])
    assert "reference_ops" not in figures  # no policy: no operator trace, no cost


def test_forbid_ops_on_the_command_line_rejects_mm_in_a_kernelbench_problem(krung, matmul,
                                                                            version):
    result = krung("run", matmul, version("torch_mm", TORCH_MM), "--json", "--rungs", RUNGS,
                   "--forbid-ops", "mm,addmm")
    correctness = _rungs(result)["correctness"]
    assert correctness["error_type"] == "ForbiddenOp", correctness
    assert "aten::mm" in correctness["error"]


def test_a_sidecar_asking_for_an_own_kernel_fails_delegation_and_passes_triton(
        krung, matmul, version):
    write(sidecar_path(matmul), "require_own_kernel: true\n")
    result = krung("run", matmul, version("at_operator", AT_OPERATOR), "--json", "--rungs",
                   RUNGS)
    correctness = _rungs(result)["correctness"]
    assert correctness["error_type"] == "Delegated", correctness
    assert "aten::mm" in correctness["error"] and correctness["hint"]
    assert correctness["figures"]["delegated"] is True
    assert correctness["figures"]["reference_ops"] == ["mm"]

    result = krung("run", matmul, version("triton_matmul", TRITON_MATMUL), "--json", "--rungs",
                   RUNGS, "--format", "json")
    correctness = _rungs(result)["correctness"]
    assert correctness["status"] == "ok", correctness
    figures = correctness["figures"]
    assert figures["delegated"] is False and figures["own_kernels"] == ["matmul_kernel"]
    assert not any(row["delegated"] for row in figures["per_case"])
    assert "mm" not in figures["reference_ops"]  # traced: it ran no torch matmul
    assert "library_work" not in figures  # Triton's interpreter hands nothing to numpy


# A token kernel of its own beside a library's matmul: the kernel launches, torch runs no
# matmul, and the work is the library's (issue 31, item 3).
TOKEN_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def token_kernel(c):
    tl.store(c, tl.load(c) + 0.0)

'''
NUMPY_MATMUL = TOKEN_KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, A, B):
        C = torch.from_numpy(A.numpy() @ B.numpy())
        token_kernel[(1,)](C)
        return C
'''
CTYPES_BLAS = TOKEN_KERNEL + '''
import ctypes
import glob
import os

import numpy

FOUND = glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir, "numpy.libs",
                               "*openblas*"))
BLAS = ctypes.CDLL(FOUND[0])
for NAME, INT in (("cblas_sgemm", ctypes.c_int), ("scipy_cblas_sgemm64_", ctypes.c_int64),
                  ("cblas_sgemm64_", ctypes.c_int64)):
    if hasattr(BLAS, NAME):
        SGEMM = getattr(BLAS, NAME)
        break


class ModelNew(nn.Module):
    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        (M, K), N = A.shape, B.shape[1]
        C = torch.empty(M, N)
        f, p = ctypes.c_float, ctypes.c_void_p
        SGEMM(INT(101), INT(111), INT(111), INT(M), INT(N), INT(K), f(1.0), p(A.data_ptr()),
              INT(K), p(B.data_ptr()), INT(N), f(0.0), p(C.data_ptr()), INT(N))
        token_kernel[(1,)](C)
        return C
'''


def test_library_symbols_are_named_and_others_are_not():
    from krung.worker.library_calls import library_of

    assert [library_of(s) for s in ("cblas_sgemm", "scipy_cblas_sgemm64_", "sgemm_", "dgemm",
                                     "cublasLtMatmul", "cublasSgemm_v2", "cudnnConvolutionForward",
                                     "mkl_sparse_s_mm", "syscall", "prctl", "landlock_add_rule",
                                     "getpid")] == \
        ["BLAS", "BLAS", "BLAS", "BLAS", "cuBLASLt", "cuBLAS", "cuDNN", "MKL", None, None, None,
         None]


def test_a_vendor_librarys_device_kernels_beside_a_token_kernel_are_delegation():
    """On a GPU, what CUPTI names: cuBLAS's gemm beside a kernel of the version's own makes the
    call delegated, the library named, whether or not the reference ran that gemm too; torch's
    own kernels and the version's (Triton's, whatever their names) are not a library's."""
    from krung.judge.delegation import Delegation, library_kernel

    names = {"nvjet_tst_192x192_64x4_1x2_h_bz_coopB_TNT": "cuBLAS",
             "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas": "cuBLAS",
             "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16>": "cuBLAS",
             "ampere_sgemm_128x64_tn": "cuBLAS", "void gemmSN_NN_kernel<float, 256, 4>": "cuBLAS",
             "implicit_convolve_sgemm<float>": "cuDNN",
             "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor>": None,
             "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_nn": "cuBLAS",
             "matmul_kernel": None, "my_gemm_kernel": None, "kernel_cutlass_gemm_0": None,
             "void hopper_gemm_kernel<float>(float const*, float*, int)": None,
             "beat_cublas_gemm": None, "vector_fft_kernel": None, "fft_r2c_radix4": None}
    assert {name: library_kernel(name) for name in names} == names
    off = Delegation()  # KRUNG_LIBRARY_KERNELS=0
    assert off.note({"kernels": ["token_kernel"], "device_kernels": [
        "token_kernel", "ampere_sgemm_128x64_tn"]}, "n=64", None) is False

    gemm = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas"
    for reference_kernels in ({gemm}, set()):
        delegation = Delegation(reference_kernels=reference_kernels, library_kernels=True)
        token = {"kernels": ["token_kernel"], "device_kernels": ["token_kernel", gemm]}
        assert delegation.note(token, "n=64", None) is True
        figures = delegation.figures(traced=False)
        assert figures["own_kernels"] == ["token_kernel"]
        assert figures["library_work"] == [f"cuBLAS kernels: {gemm}"]
    # A CUDA C++ kernel of the version's own named like cuBLAS's: its source spells the name.
    own = Delegation(named={"ampere_sgemm_128x64_tn", "torch"}, library_kernels=True)
    assert own.note({"kernels": [], "device_kernels": ["ampere_sgemm_128x64_tn"]}, "n=64",
                    None) is False
    assert own.figures(traced=False)["own_kernels"] == ["ampere_sgemm_128x64_tn"]
    honest = Delegation(reference_kernels={gemm}, library_kernels=True)
    assert honest.note({"kernels": ["gemm_kernel_tuned"], "device_kernels": [
        "gemm_kernel_tuned", "void at::native::vectorized_elementwise_kernel<4>"]},
        "n=64", None) is False
    assert "library_work" not in honest.figures(traced=False)


def _numpy_openblas() -> bool:
    import glob
    import os

    import numpy

    return bool(glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir,
                                       "numpy.libs", "*openblas*")))


def test_numpy_beside_a_token_kernel_is_delegated_and_named(krung, matmul, version):
    path = version("numpy_matmul", NUMPY_MATMUL)
    result = krung("run", matmul, path, "--json", "--rungs", RUNGS)
    correctness = _rungs(result)["correctness"]
    assert correctness["status"] == "ok", correctness  # no policy: said, not failed
    figures = correctness["figures"]
    assert figures["own_kernels"] == ["token_kernel"] and figures["delegated"] is True
    assert figures["library_work"] == ["numpy: tensors handed to it during the call"]
    write(sidecar_path(matmul), "require_own_kernel: true\n")
    correctness = _rungs(krung("run", matmul, path, "--json", "--rungs", RUNGS))["correctness"]
    assert correctness["error_type"] == "Delegated", correctness
    assert "handed its work to a library (numpy" in correctness["error"]
    assert "beside its own kernels" in correctness["error"]


@pytest.mark.skipif(not _numpy_openblas(), reason="needs numpy's bundled OpenBLAS (a wheel)")
def test_blas_through_ctypes_beside_a_token_kernel_fails_an_own_kernel_policy(krung, matmul,
                                                                             version):
    write(sidecar_path(matmul), "require_own_kernel: true\n")
    result = krung("run", matmul, version("ctypes_blas", CTYPES_BLAS), "--json", "--rungs",
                   RUNGS)
    correctness = _rungs(result)["correctness"]
    assert correctness["error_type"] == "Delegated", correctness
    assert "ctypes: " in correctness["error"] and "(BLAS)" in correctness["error"]
    assert any("sgemm" in w for w in correctness["figures"]["library_work"])


def test_a_broken_sidecar_is_a_problem_error_naming_each_defect(tmp_path, matmul):
    write(sidecar_path(matmul), "forbid_ops: 3\nrequire_own_kernel: maybe\ncolour: red\n")
    with pytest.raises(ProblemError) as caught:
        read_sidecar(matmul)
    said = str(caught.value) + str(getattr(caught.value, "defects", ""))
    assert "forbid_ops" in said and "require_own_kernel" in said and "colour" in said
    folder = tmp_path / "gpumode_problem"
    write(folder / "krung.yml", "forbid: torch.matmul\nforbid_ops: [mm, aten::bmm]\n")
    assert read_sidecar(folder) == Policy(("torch.matmul",), ("mm", "aten::bmm"), False)


def test_the_options_policy_joins_lists_and_is_added_to_the_problems_own():
    settings = options.settings_of({"forbid_ops": ["mm", "bmm"], "forbid": "torch.mm",
                                    "require_own_kernel": True})
    policy = Policy.of(settings)
    assert policy == Policy(("torch.mm",), ("mm", "bmm"), True)

    class Problem:
        forbid, forbid_ops, require_own_kernel = ["torch.matmul"], ["mm"], False

    problem = Problem()
    apply_policy(problem, policy)
    assert problem.forbid == ["torch.matmul", "torch.mm"] and problem.forbid_ops == ["mm", "bmm"]
    assert problem.require_own_kernel
    with pytest.raises(UsageError, match="--forbid-ops"):
        options.settings_of({"forbid_ops": "mm; rm -rf"}, Settings())


@pytest.mark.gpu
def test_on_a_gpu_cupti_tells_own_cuda_kernels_from_the_references_library_kernels(
        krung, matmul, version):
    """On the H200: a torch.mm version launches only the cuBLAS kernels the reference launches
    too (Delegated under --require-own-kernel); a CUDA C++ version's kernel is its own; the
    Triton version's too."""
    result = krung("run", matmul, version("torch_mm", TORCH_MM), "--device", "cuda", "--json",
                   "--rungs", RUNGS, "--require-own-kernel")
    correctness = _rungs(result)["correctness"]
    assert correctness["error_type"] == "Delegated", correctness

    beside = TOKEN_KERNEL + TORCH_MM.split("\n\n", 1)[1].replace(
        "return torch.mm(A, B)", "C = torch.mm(A, B)\n        token_kernel[(1,)](C)\n        return C")
    result = krung("run", matmul, version("token_beside_mm", beside), "--device", "cuda",
                   "--json", "--rungs", RUNGS, "--require-own-kernel",
                   env={"KRUNG_LIBRARY_KERNELS": "1"})  # the default, said: the test is about it
    correctness = _rungs(result)["correctness"]  # cuBLAS named: the token kernel carries nothing
    assert correctness["error_type"] == "Delegated" and "cuBLAS" in correctness["error"], \
        correctness

    result = krung("run", matmul, version("triton_matmul", TRITON_MATMUL), "--device", "cuda",
                   "--json", "--rungs", RUNGS, "--require-own-kernel")
    correctness = _rungs(result)["correctness"]
    assert correctness["status"] == "ok", correctness
    assert "matmul_kernel" in correctness["figures"]["own_kernels"]

    cuda = PROBLEMS / "vector_add" / "solutions" / "cuda_inline.py"
    result = krung("run", "vector_add", cuda, "--device", "cuda", "--json", "--rungs", RUNGS,
                   "--require-own-kernel", timeout=900)
    correctness = _rungs(result)["correctness"]
    assert correctness["status"] == "ok", correctness
    assert correctness["figures"]["delegated"] is False
    assert any("add_kernel" in k for k in correctness["figures"]["own_kernels"])


# A token kernel of its own beside torch's kernels doing the softmax: no library kernel, no
# forbidden name; the census's times show whose kernels did the work (issue 31, item 3).
TOKEN_BESIDE_TORCH = '''
import torch
import triton
import triton.language as tl


@triton.jit
def token_kernel(c):
    tl.store(c, tl.load(c) + 0.0)


def kernel(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
    out = (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
    token_kernel[(1,)](out)
    return out
'''


def test_own_kernels_that_carry_too_little_of_a_calls_device_time_are_said():
    """The census's device times: own kernels under half of a call's time, with torch's
    kernels doing the rest, are named with their shares; glue beside them is not."""
    from krung.judge.delegation import Delegation

    rng = random.Random()
    token, torch_ns = rng.randint(1_000, 3_000), rng.randint(20_000, 90_000)
    thin = Delegation()
    reply = {"kernels": ["token_kernel"], "device_kernels": ["token_kernel", "at::native::exp"],
             "device_kernel_ns": {"token_kernel": token, "at::native::exp": torch_ns}}
    assert thin.note(reply, "rows=5", None) is False  # it launched a kernel of its own
    assert "at::native::exp" in thin.thin["rows=5"] and "token_kernel" in thin.thin["rows=5"]
    assert thin.figures(False)["own_share"] == round(100 * token / (token + torch_ns), 1)
    assert thin.failure("rows=5", {}).error_type == "Delegated"

    carried = Delegation()
    reply["device_kernel_ns"] = {"token_kernel": torch_ns, "at::native::exp": token}
    carried.note(reply, "rows=5", None)
    assert not carried.thin and carried.figures(False)["own_share"] > 50


@pytest.mark.gpu
@pytest.mark.over_budget  # two cold runs on a GPU, each compiling its Triton kernels: 20 s
def test_on_a_gpu_a_token_kernel_beside_torchs_kernels_fails_an_own_kernel_policy(
        krung, version):
    """On the H200: softmax in torch's kernels beside a token Triton kernel is Delegated under
    --require-own-kernel, its own kernels' share named; the Triton softmax passes, its share
    said."""
    result = krung("run", "softmax", version("token_beside_torch", TOKEN_BESIDE_TORCH),
                   "--device", "cuda", "--json", "--rungs", RUNGS, "--require-own-kernel")
    correctness = _rungs(result)["correctness"]
    assert correctness["error_type"] == "Delegated", correctness
    assert "of the call's device time" in correctness["error"], correctness
    assert correctness["figures"]["own_share"] < 50, correctness

    honest = PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py"
    result = krung("run", "softmax", honest, "--device", "cuda", "--json", "--rungs", RUNGS,
                   "--require-own-kernel")
    correctness = _rungs(result)["correctness"]
    assert correctness["status"] == "ok", correctness
    assert correctness["figures"]["own_share"] >= 50, correctness
