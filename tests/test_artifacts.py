"""The artifacts rung on a machine without a GPU: Triton versions compiled for sm_90a
(TTIR, TTGIR, LLIR, PTX, CUBIN, SASS) from what ran under the interpreter, a CUDA C++
version through nvcc, figures parsed from the real files; and the commands that show and
compare them."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

import krung
from krung.judge.rungs.artifacts.inspect import inspect
from tests.conftest import PROBLEMS

pytest.importorskip("triton")

STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin", "sass", "ptxas", "json")


def artifacts_of(run: krung.Run) -> dict:
    rung = run.rung("artifacts")
    assert rung is not None and rung.ok, "\n".join(r.line() for r in run.rungs)
    return rung.figures


def test_triton_vector_add_gets_every_stage_for_sm90(store):
    solution = PROBLEMS / "vector_add" / "solutions" / "triton_blocked.py"
    run = krung.evaluate("vector_add", solution, store=store, device="cpu",
                         rungs="static,compile,run,correctness,artifacts")
    figures = artifacts_of(run)
    assert figures["arch"] == "sm_90a" and figures["source"] == "compiled for sm_90a"
    rows = figures["per_kernel"]
    assert {r["kernel"] for r in rows} == {"add_kernel"}
    # n=1 is specialised to a constant, others by divisibility by 16: several specialisations
    assert figures["specialisations"] == len(rows) >= 2
    folder = store.parent / "runs" / run.run_id
    for row in rows:
        assert row["specialisation"].startswith("BLOCK=1024_fp32_w4s3_")
        assert set(STAGES) - {"json"} <= set(row["files"]), row["files"]
        for name in row["files"].values():
            assert (folder / name).is_file() and (folder / name).stat().st_size > 0
        assert (folder / "artifacts" / "add_kernel" / f"{row['specialisation']}.json").is_file()
        ptx = (folder / row["files"]["ptx"]).read_text()
        assert ".target sm_90a" in ptx and ".entry add_kernel" in ptx
        assert "LDG.E" in (folder / row["files"]["sass"]).read_text()
        assert row["registers"] > 0 and row["threads_per_block"] == 128
        assert row["spills"] is False and row["stack_bytes"] == 0
        assert 0 < row["occupancy"] <= 1 and row["limited_by"]
        assert row["sass"]["ldg"] and row["sass"]["stg"] and row["sass"]["instructions"] > 10
        assert row["launches"] >= 1
    # The aligned, divisible-by-16 case loads 4 floats a thread at once: LDG.E.128.
    assert any(r["sass"]["ldg"].get("128") for r in rows), [r["sass"]["ldg"] for r in rows]


def test_triton_matmul_uses_hopper_tensor_cores(store):
    solution = PROBLEMS / "matmul" / "solutions" / "triton_grouped_tiles.py"
    run = krung.evaluate("matmul", solution, store=store, device="cpu",
                         rungs="static,compile,run,artifacts")
    rows = artifacts_of(run)["per_kernel"]
    # the run rung's case, and what the bench cases launch (found from their shapes)
    ran = [r for r in rows if r["ran"]]
    assert len(ran) == 1 and all("(bench)" in " ".join(r["cases"]) for r in rows if not r["ran"])
    row = ran[0]
    assert all(r["sass"]["tensor_core"].get("HGMMA", 0) > 0 for r in rows)
    assert row["sass"]["tensor_core"].get("HGMMA", 0) > 0, row["highlights"]
    assert "HGMMA" in row["highlights"]
    assert row["threads_per_block"] == 256 and row["dynamic_smem_bytes"] > 0
    assert row["limited_by"] and row["blocks_per_sm"] >= 1
    assert artifacts_of(run)["tensor_core_instructions"] >= row["sass"]["tensor_core"]["HGMMA"]
    ttgir = (store.parent / "runs" / run.run_id / row["files"]["ttgir"]).read_text()
    assert "warp_group_dot" in ttgir or "wgmma" in ttgir


def test_a_torch_version_has_no_kernels_to_inspect(store, scale_problem, version):
    path = version("plain", "def kernel(x):\n    return x * 2 + 1\n")
    run = krung.evaluate(scale_problem, path, store=store, device="cpu",
                         rungs="static,compile,artifacts")
    figures = artifacts_of(run)
    assert figures["kernels"] == 0 and "no kernel to inspect" in figures["note"]


NOT_FOR_THE_COMPILER = '''
import torch
import triton
import triton.language as tl


def double(x):  # plain Python, not @triton.jit: the interpreter runs it, the compiler cannot
    return x * 2


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, double(a + b) / 2, mask=mask)


def kernel(a, b):
    out = torch.empty_like(a)
    add_kernel[(triton.cdiv(a.numel(), 256),)](a, b, out, a.numel(), BLOCK=256)
    return out
'''


def test_a_kernel_only_the_interpreter_accepts_fails_the_rung(store, version):
    run = krung.evaluate("vector_add", version("interp_only", NOT_FOR_THE_COMPILER),
                         store=store, device="cpu", rungs="static,compile,run,artifacts")
    assert run.rung("run").ok  # the interpreter runs it...
    rung = run.rung("artifacts")
    assert rung.status is krung.Status.FAILED  # ...the compiler does not
    assert rung.error_type == "TargetCompileError"
    assert "double" in rung.error and "sm_90a" in rung.error
    assert "interpreter" in rung.hint


CUDA_VERSION = r'''
"""y = 2x + 1 in CUDA C++: float4 loads, a tile in shared memory, through load_inline."""
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void scale_kernel(const float4* __restrict__ x, float4* __restrict__ y, int n4) {
    __shared__ float4 tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) tile[threadIdx.x] = x[i];
    __syncthreads();
    if (i < n4) {
        float4 v = tile[threadIdx.x];
        y[i] = make_float4(2.f * v.x + 1.f, 2.f * v.y + 1.f, 2.f * v.z + 1.f, 2.f * v.w + 1.f);
    }
}

torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n4 = x.numel() / 4;
    scale_kernel<<<(n4 + 255) / 256, 256>>>(
        reinterpret_cast<const float4*>(x.data_ptr<float>()),
        reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
    return y;
}
"""

ext = load_inline("scale_ext", cpp_sources="torch::Tensor scale(torch::Tensor x);",
                  cuda_sources=CUDA, functions=["scale"])


def kernel(x):
    return ext.scale(x)
'''


@pytest.mark.slow  # nvcc over torch's headers
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
def test_a_cuda_cpp_version_gets_ptx_cubin_and_sass_through_nvcc(store, scale_problem,
                                                                  version):
    run = krung.evaluate(scale_problem, version("cuda_v1", CUDA_VERSION), store=store,
                         device="cpu", rungs="static,compile,artifacts")
    figures = artifacts_of(run)  # even where the extension cannot be built (no GPU)
    rows = figures["per_kernel"]
    assert [(r["kernel"], r["function"]) for r in rows] == [("scale_ext", "scale_kernel")]
    row = rows[0]
    assert row["specialisation"] == "sm_90a" and row["dsl"] == "cuda"
    folder = store.parent / "runs" / run.run_id
    assert {"source", "ptx", "cubin", "ptxas", "sass"} <= set(row["files"])
    assert ".entry _Z12scale_kernel" in (folder / row["files"]["ptx"]).read_text()
    report = (folder / row["files"]["ptxas"]).read_text()
    assert "Used" in report and "registers" in report
    assert row["registers"] > 0 and row["static_smem_bytes"] == 256 * 16
    assert row["sass"]["ldg"] == {"128": 1} and row["sass"]["stg"] == {"128": 1}
    assert row["sass"]["bar"] >= 1 and row["sass"]["sts"] >= 1 and row["sass"]["lds"] >= 1
    assert row["threads_per_block"] == 256  # from the <<<grid, 256>>> launch in the source
    assert row["occupancy"] == 1.0 and row["blocks_per_sm"] == 8
    figures_file = folder / "artifacts" / "scale_ext" / "sm_90a.figures.json"
    assert json.loads(figures_file.read_text())[0]["registers"] == row["registers"]


TRITON_ADD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask),
             mask=mask)


def kernel(a, b):
    out = torch.empty_like(a)
    add_kernel[(triton.cdiv(a.numel(), BLOCK),)](a, b, out, a.numel(), BLOCK=BLOCK,
                                                  num_warps=WARPS)
    return out
'''


def test_artifacts_and_diff_commands(krung, tmp_path, version):
    wide = version("wide", TRITON_ADD.replace("BLOCK=BLOCK", "BLOCK=1024")
                   .replace("a.numel(), BLOCK)", "a.numel(), 1024)").replace("WARPS", "4"))
    narrow = version("narrow", TRITON_ADD.replace("BLOCK=BLOCK", "BLOCK=64")
                     .replace("a.numel(), BLOCK)", "a.numel(), 64)").replace("WARPS", "1"))
    ids = []
    for path in (wide, narrow):
        result = krung("run", "vector_add", path, "--rungs", "static,compile,run,artifacts",
                       "--json")
        assert result.code == 0, result.stdout + result.stderr
        ids.append(result.json()["run_id"])

    listed = krung("artifacts", ids[0])
    assert listed.code == 0, listed.stderr
    assert "[artifacts] ok" in listed.stdout and "add_kernel" in listed.stdout
    assert ".sass  (sass," in listed.stdout and ".ptx  (ptx," in listed.stdout

    sass = krung("artifacts", ids[0], "--kind", "sass", "--kernel", "add_kernel")
    assert sass.code == 0, sass.stderr
    assert "Function : add_kernel" in sass.stdout and "EXIT" in sass.stdout
    # as a next step prints it: every SASS file of the run, each under its name
    every = krung("artifacts", ids[0], "--kind", "sass")
    names = [f["files"]["sass"] for f in krung("artifacts", ids[0], "--json").json()["kernels"]]
    assert every.code == 0, every.stderr
    headers = [line for line in every.stdout.splitlines() if line.startswith("==> ")]
    assert len(headers) == len(names) or (len(names) == 1 and not headers)
    assert every.stdout.count("Function : add_kernel") == len(names)

    diff = krung("diff", ids[0], ids[1], "--kind", "sass", "--kind", "ptx")
    assert diff.code == 0, diff.stderr
    assert "-    add_kernel[(triton.cdiv(a.numel(), 1024),)]" in diff.stdout
    assert "kernel add_kernel: BLOCK=1024_fp32_w4s3_" in diff.stdout
    assert "threads_per_block 128 -> 32" in diff.stdout
    assert "--- a/add_kernel.sass" in diff.stdout and "--- a/add_kernel.ptx" in diff.stdout

    data = krung("diff", ids[0], ids[1], "--json").json()
    kernel = data["kernels"][0]
    assert kernel["figures"]["threads_per_block"] == {"a": 128, "b": 32, "delta": -96,
                                                      "ratio": 0.25}
    assert kernel["sass_diff"].startswith("--- a/add_kernel.sass")
    assert not any(line[1:].lstrip().startswith("/*") for line in
                   kernel["sass_diff"].splitlines() if line[:1] in "+-")  # no addresses


TWO_KERNELS_PY = '''
from pathlib import Path

from torch.utils.cpp_extension import load


def kernel(a, b):
    return load("two", sources=[str(Path(__file__).with_suffix(".cu"))]).vector_add(a, b)
'''
TWO_KERNELS_CU = '''
extern "C" __global__ void same_kernel(const float* a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * 2.f;
}
extern "C" __global__ void changed_kernel(const float* a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + 1.f;
}
'''


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_diff_of_a_two_kernel_cu_shows_each_functions_own_sass(krung, tmp_path):
    ids = []
    for side, body in (("a", "a[i] + 1.f"), ("b", "sqrtf(a[i]) * 3.f")):
        folder = tmp_path / side
        folder.mkdir()
        (folder / "two.py").write_text(TWO_KERNELS_PY)
        (folder / "two.cu").write_text(TWO_KERNELS_CU.replace("a[i] + 1.f", body))
        result = krung("run", "vector_add", folder / "two.py", "--rungs", "static,artifacts",
                       "--json")
        assert result.code == 0, result.stdout + result.stderr
        ids.append(result.json()["run_id"])
    data = krung("diff", ids[0], ids[1], "--kind", "sass", "--json").json()
    kernels = {k["function"]: k for k in data["kernels"]}
    assert set(kernels) == {"same_kernel", "changed_kernel"}
    assert kernels["same_kernel"]["sass_diff"] == ""  # its own SASS, which did not change
    changed = kernels["changed_kernel"]["sass_diff"]
    assert "MUFU.RSQ" in changed or "MUFU.SQRT" in changed
    assert "same_kernel" not in changed


NO_KERNEL_PY = '''
from torch.utils.cpp_extension import load_inline

ext = load_inline("no_kernel", cpp_sources="", no_implicit_headers=True,
                  cuda_sources="__device__ float twice(float x) { return 2 * x; }")


def kernel(a, b):
    return ext.vector_add(a, b)
'''


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_an_error_row_shows_its_message_after_the_figures_columns(krung, version):
    result = krung("run", "vector_add", version("no_kernel", NO_KERNEL_PY), "--rungs",
                   "static,artifacts", "--json")
    run = result.json()
    assert run["rungs"][1]["error_type"] == "TargetCompileError", run["rungs"][1]
    listed = krung("artifacts", run["run_id"], env={"COLUMNS": "300"})
    lines = listed.stdout.splitlines()
    header = next(line for line in lines if "registers" in line and "highlights" in line)
    row = next(line for line in lines if "error:" in line)
    assert row.index("error:") >= header.index("highlights"), listed.stdout


TILELANG_DUMP = '''
import json, sys
from pathlib import Path
import tilelang
import tilelang.language as T

@T.prim_func
def scale(X: T.Tensor((4096,), "float32"), Y: T.Tensor((4096,), "float32")):
    with T.Kernel(16, threads=128) as bx:
        for i in T.Parallel(256):
            Y[bx * 256 + i] = X[bx * 256 + i] * 2.0 + 1.0

kernels = [tilelang.compile(scale, out_idx=[-1], target={"kind": "cuda", "arch": arch})
           for arch in ("sm_90a", "sm_80")]
from krung.worker import tilelang_kernels
print(json.dumps(tilelang_kernels.dump(Path(sys.argv[1]), kernels)))  # a GPU would call them
'''


@pytest.mark.skipif(shutil.which("nvcc") is None or importlib.util.find_spec("tilelang") is None,
                    reason="needs TileLang and nvcc (TileLang compiles for sm_90a without a GPU)")
def test_tilelang_kernels_give_their_cuda_source_ptx_and_cubin(tmp_path):
    """What the worker does on a GPU after a TileLang version ran, here in a process that
    compiled a TileLang kernel for sm_90a; then the judge's inspection of those files."""
    script = tmp_path / "compile_scale.py"  # TileLang reads its functions' source
    script.write_text(TILELANG_DUMP)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    hopper, ampere = json.loads(done.stdout.strip().splitlines()[-1])
    assert ampere["specialisation"].startswith("sm_80-") and ampere["target"] == "cuda:80"
    assert ".target sm_80" in (tmp_path / "scale_kernel" / ampere["files"]["ptx"]).read_text()
    record = hopper
    assert record["kernel"] == "scale_kernel" and record["dsl"] == "tilelang"
    assert record["specialisation"].startswith("sm_90a-") and "error" not in record
    assert record["target"] == "cuda:90"
    folder = tmp_path / "scale_kernel"
    assert "__global__" in (folder / record["files"]["cu"]).read_text()
    assert ".entry scale_kernel" in (folder / record["files"]["ptx"]).read_text()
    [row] = inspect(record, tmp_path)
    assert row["function"] == "scale_kernel" and row["registers"] > 0
    assert row["threads_per_block"] == 128 and not row["spills"]
    assert any("dynamic shared memory" in note for note in row["notes"])
    assert "FFMA" in (folder / record["files"]["sass"]).read_text()  # inspect added it
