"""Every DSL on a machine without a GPU: each example is recognised by the static rung; a
DSL that is not installed fails compile with its install command; CUDA C++ is compiled for
sm_90a with the real nvcc (resources, errors at the version's .py line, a .cu beside it, the
build cache); @triton.autotune is tuned before timing and its choice recorded."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import krung
from krung.judge import dsls
from krung.worker.cuda_source import diagnostics, source_line, static_sources
from tests.conftest import BROKEN_CUDA as BROKEN
from tests.conftest import PROBLEMS, write

SOLUTIONS = PROBLEMS / "vector_add" / "solutions"
EXAMPLES = {"cuda_inline.py": "cuda", "cuda_file.py": "cuda", "cupy_raw.py": "cupy",
            "numba_jit.py": "numba", "cutedsl.py": "cutedsl", "tilelang_jit.py": "tilelang",
            "triton_autotuned.py": "triton"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")


@pytest.mark.parametrize("name, dsl", sorted(EXAMPLES.items()))
def test_the_static_rung_recognises_each_example(store, name, dsl):
    run = krung.evaluate("vector_add", SOLUTIONS / name, store=store, device="cpu",
                         rungs="static")
    assert run.rung("static").ok and run.rung("static").figures["dsl"] == dsl


@pytest.mark.parametrize("name, module, command", [
    ("cutedsl.py", "cutlass", "pip install nvidia-cutlass-dsl"),
    ("tilelang_jit.py", "tilelang", "pip install tilelang"),
    ("numba_jit.py", "numba", "pip install 'numba-cuda[cu12]'"),
    ("cupy_raw.py", "cupy", "pip install cupy-cuda12x"),
])
def test_a_dsl_that_is_not_installed_fails_compile_with_its_install_command(
        store, name, module, command):
    if dsls.installed(module):
        pytest.skip(f"{module} is installed here")
    run = krung.evaluate("vector_add", SOLUTIONS / name, store=store, device="cpu",
                         rungs="static,compile,run")
    rung = run.rung("compile")
    assert rung.error_type == "DSLNotInstalled", rung.line()
    assert module in rung.error and rung.hint.startswith(f"install it: {command}")
    line = int(rung.location.rsplit(":", 1)[1])  # the line that imports it
    assert module in (SOLUTIONS / name).read_text().splitlines()[line - 1]
    assert run.rung("run").reason == "needs compile, which failed"


@pytest.mark.slow  # nvcc over torch's headers
@needs_nvcc
def test_cuda_cpp_compiles_for_sm90_without_a_gpu_and_is_not_run(store):
    run = krung.evaluate("vector_add", SOLUTIONS / "cuda_inline.py", store=store,
                         device="cpu", rungs="static,compile,run,correctness")
    compiled = run.rung("compile")
    assert compiled.ok, compiled.line() + (compiled.details or "")
    figures = compiled.figures
    assert figures["arch"] == "sm_90a" and figures["ran"] is False and figures["kernels"] == 1
    row = figures["per_kernel"][0]
    assert row["case"] == "krung_vector_add:add_kernel"
    assert 0 < row["registers"] <= 64 and row["spill_store_bytes"] == 0
    assert row["static_smem_bytes"] == 0 and row["spills"] is False
    assert "needs a GPU" in run.rung("run").reason
    assert "needs a GPU" in run.rung("correctness").reason  # the root cause, passed along
    assert run.ok  # skipped for the machine, not failed
    from krung.host import report

    assert report.verdict(run).endswith("(run, correctness skipped); correctness NOT checked")
    next_line = report.agent_summary(run).splitlines()[-1]
    command, why = next_line.split("  # ", 1)
    assert command.startswith("next: krung run ") and command.endswith(" --device cuda")
    assert why.startswith("correctness is not checked yet: run was skipped (no GPU here")
    folder = store.parent / "runs" / run.run_id / "artifacts" / "krung_vector_add"
    assert ".entry _Z10add_kernel" in (folder / "sm_90a.ptx").read_text()
    assert "Used" in (folder / "sm_90a.ptxas").read_text()


@pytest.mark.slow  # nvcc over torch's headers
@needs_nvcc
def test_an_nvcc_error_names_the_line_of_the_py_file(store, version):
    path = version("broken", BROKEN)
    run = krung.evaluate("vector_add", path, store=store, device="cpu",
                         rungs="static,compile,run")
    rung = run.rung("compile")
    assert rung.error_type == "CudaCompileError", rung.line()
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "bb[i]" in text)
    assert rung.location == f"{path}:{line}"
    assert 'identifier "bb" is undefined' in rung.error
    assert f"{path}:{line}: error: identifier \"bb\" is undefined" in rung.details
    assert "out[i] = a[i] + bb[i];" in rung.details  # the version's own line, shown
    assert run.rung("run").status is krung.Status.SKIPPED


BESIDE_PY = '''
"""Its CUDA is in the .cu file of the same name, built when first called."""
from pathlib import Path

from torch.utils.cpp_extension import load


def kernel(a, b):
    return load("beside", sources=[str(Path(__file__).with_suffix(".cu"))]).vector_add(a, b)
'''
BESIDE_CU = '''
// Two kernels; the second keeps a tile in shared memory.
extern "C" __global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" __global__ void __launch_bounds__(128) tile_kernel(const float* a, float* out, int n) {
    __shared__ float tile[128];
    int i = blockIdx.x * 128 + threadIdx.x;
    tile[threadIdx.x] = i < n ? a[i] : 0.f;
    __syncthreads();
    if (i < n) out[i] = tile[127 - threadIdx.x] + undefined_here;
}
'''


@needs_nvcc
def test_a_cu_file_beside_the_version_is_compiled_and_its_errors_point_into_it(
        store, tmp_path):
    py = write(tmp_path / "versions" / "beside.py", BESIDE_PY)
    cu = write(tmp_path / "versions" / "beside.cu", BESIDE_CU)
    run = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    rung = run.rung("compile")
    assert rung.error_type == "CudaCompileError", rung.line()
    line = next(i for i, t in enumerate(cu.read_text().splitlines(), 1) if "undefined_here" in t)
    assert rung.location == f"{cu}:{line}"
    cu.write_text(cu.read_text().replace(" + undefined_here", ""))
    run = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    rung = run.rung("compile")
    assert rung.ok, rung.line() + (rung.details or "")
    rows = {row["case"]: row for row in rung.figures["per_kernel"]}
    assert set(rows) == {"beside:add_kernel", "beside:tile_kernel"}
    assert rows["beside:tile_kernel"]["static_smem_bytes"] == 128 * 4
    assert rows["beside:tile_kernel"]["threads_per_block"] == 128  # __launch_bounds__


@pytest.mark.slow  # nvcc over torch's headers
@needs_nvcc
def test_a_second_compile_of_the_same_source_is_a_cache_hit(store, version):
    source = (SOLUTIONS / "cuda_inline.py").read_text().replace(
        "krung_vector_add", "krung_cache_test")
    first = krung.evaluate("vector_add", version("cached", source), store=store, device="cpu",
                           rungs="static,compile")
    second = krung.evaluate("vector_add", version("cached_again", source + "\n# edited\n"),
                            store=store, device="cpu", rungs="static,compile")
    a, b = first.rung("compile").figures, second.rung("compile").figures
    assert a["cache"] == "miss" and b["cache"] == "hit", (a, b)
    assert b["compile_s"] < a["compile_s"] / 5
    assert b["per_kernel"] == a["per_kernel"]
    assert (store.parent / "build_cache" / "nvcc").is_dir()


@pytest.mark.slow  # three configs tuned under the interpreter, each built for sm_90
def test_autotune_is_done_before_timing_and_its_choice_recorded(store):
    pytest.importorskip("triton")
    run = krung.evaluate("vector_add", SOLUTIONS / "triton_autotuned.py", store=store,
                         device="cpu", rungs="static,compile,run,correctness,benchmark,artifacts")
    assert run.ok, "\n".join(r.line() for r in run.rungs)
    (row,) = run.rung("benchmark").figures["per_case"]
    (tuned,) = row["autotune"]
    assert tuned["kernel"] == "add_kernel" and tuned["key"] == {"n": 2**18}
    assert tuned["config"]["BLOCK"] in (256, 1024, 4096) and tuned["configs"] == 3
    assert row["config"] == f"add_kernel: {tuned['label']}"
    assert f"BLOCK={tuned['config']['BLOCK']}" in tuned["label"]
    # the artifacts are those of the configs chosen, never of the ones only tried
    figures = run.rung("artifacts").figures
    chosen = {(t["config"]["BLOCK"], t["config"]["num_warps"]) for t in figures["autotune"]}
    built = {(int(r["specialisation"].split("_")[0].split("=")[1]),
              int(r["specialisation"].split("_w")[1].split("s")[0]))
             for r in figures["per_kernel"]}
    assert built == chosen, (built, chosen)
    # the GPU-sized bench cases were never tuned here: they take the largest tuned key's pick
    largest = max(figures["autotune"], key=lambda t: t["key"]["n"])["config"]
    benched = [r["specialisation"] for r in figures["per_kernel"]
               if any(c.endswith("(bench)") for c in r["cases"])]
    assert benched and all(s.startswith(f"BLOCK={largest['BLOCK']}_fp32_w{largest['num_warps']}s")
                           for s in benched), (benched, largest)
    summary = krung.agent_summary(run)
    assert f"autotuned add_kernel: {tuned['label']}" in summary


def test_source_lines_and_nvcc_diagnostics():
    text = 'x = 1\nCUDA = r"""\n__global__ void k() {\n  y;\n}\n"""\n'
    code = '\n__global__ void k() {\n  y;\n}\n'
    assert source_line(text, code) == 2  # the code's first (empty) line sits on line 2
    output = ('nvcc 13.0 exited with status 2: /tmp/a/sm_90a.cu(7): error: identifier "y" '
              'is undefined\n    y;\n    ^\n\n1 error detected in the compilation of "a.cu".')
    (found,) = diagnostics(output, "/other/sm_90a.cu")
    assert found["line"] == 7 and found["ours"] and found["message"] == 'identifier "y" is undefined'


def test_static_sources_find_a_lazy_load_inline(tmp_path):
    path = write(tmp_path / "lazy.py", BROKEN)
    (source,) = static_sources(path)
    assert source["origin"] == "load_inline" and source["name"] == "broken_add"
    assert "bb[i]" in source["code"] and source["torch"] is True


CPP_ONLY = '''
import torch
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) {
    return x * 2;
}
"""
ext = load_inline("krung_twice", cpp_sources=CPP, functions=["twice"])
'''


@pytest.mark.slow  # g++ builds a torch extension
@pytest.mark.skipif(shutil.which("ninja") is None or shutil.which("c++") is None,
                    reason="torch's extension builds need ninja and a C++ compiler")
def test_torch_builds_in_the_cache_once_and_reuses_it(tmp_path):
    """torch's own build path (C++ only here: a CPU build of torch cannot link CUDA), run
    twice in fresh processes as two worker runs would: the second finds the build."""
    import json
    import subprocess
    import sys

    version = write(tmp_path / "cpp_only.py", CPP_ONLY)
    script = ("import json, runpy, sys\nfrom pathlib import Path\nfrom krung.worker import torch_build\n"
              f"torch_build.install({str(tmp_path / 'cache')!r}, Path({str(version)!r}))\n"
              f"runpy.run_path({str(version)!r})\nprint(json.dumps(torch_build.builds()))\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True,
                                      text=True, check=True, timeout=600).stdout.splitlines()[-1])
            for _ in range(2)]
    (first,), (second,) = runs
    assert first["cache"] == "miss" and second["cache"] == "hit"
    assert first["folder"] == second["folder"] and "torch_extensions/krung_twice_" in first["folder"]
    assert second["build_s"] < first["build_s"] / 10


SCALE_KERNEL = r"""
extern "C" __global__ void scale_kernel(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + 1.0f;
}
"""


def test_a_kept_kernels_name_is_its_function_without_the_arch():
    from krung.judge.rungs.artifacts.dumped import _kernel_name

    # CuTeDSL 4.8.1 on the H200: <function>.<arch>.cubin
    stem = "cutlass_add_launch_Tensorgmemo1_Tensorgmemo1_Tensorgmemo1_256.sm_90a"
    assert _kernel_name(stem) == "cutlass_add_launch_Tensorgmemo1_Tensorgmemo1_Tensorgmemo1_256"
    assert _kernel_name("scale kernel/v2.sm_100f") == "scale_kernel_v2"
    assert _kernel_name("plain") == "plain" and _kernel_name("") == "kernel"


@needs_nvcc
def test_kernels_cutedsl_kept_as_it_ran_become_artifacts(tmp_path):
    """CuTeDSL writes the PTX and CUBIN of what it compiles where the worker's environment
    says; the artifacts rung inspects them like any other kernel (here nvcc stands in for
    CuTeDSL's compiler: the files are real)."""
    from krung.judge.rungs.artifacts import dumped
    from krung.judge.rungs.artifacts.inspect import inspect
    from krung.judge.rungs.artifacts.target import Target

    run_dir = tmp_path / "run"
    env = dumped.dump_env(run_dir)
    assert env["CUTE_DSL_KEEP_PTX"] == env["CUTE_DSL_KEEP_CUBIN"] == "1"
    assert Path(env["CUTE_DSL_DUMP_DIR"]).is_dir()  # CuTeDSL 4.8 keeps nothing in a missing one
    kept = Path(env["CUTE_DSL_DUMP_DIR"]) / "session"
    kept.mkdir()
    source = tmp_path / "scale.cu"
    source.write_text(SCALE_KERNEL)
    for kind in ("ptx", "cubin"):
        subprocess.run(["nvcc", "-arch=sm_90a", f"-{kind}", str(source), "-o",
                        str(kept / f"cutlass_scale_kernel.sm_90a.{kind}")], check=True)
    with (kept / "cutlass_scale_kernel.sm_90a.ptx").open("ab") as ptx:
        ptx.write(b"\0\0")  # as CuTeDSL's PTX dumps end
    out_dir = run_dir / "artifacts"
    [record] = dumped.collect(dumped.dump_dir(run_dir, "cutedsl"), out_dir, "cutedsl",
                              Target("sm_90a"))
    assert record["kernel"] == "cutlass_scale_kernel" and record["dsl"] == "cutedsl"
    [row] = inspect(record, out_dir)
    assert row["function"] == "scale_kernel" and 0 < row["registers"] <= 32, row
    assert row["spills"] is False and "ptxas" in record["files"] and "sass" in record["files"]
    assert b"\0" not in (out_dir / "cutlass_scale_kernel" / "sm_90a.ptx").read_bytes()
    assert dumped.collect(tmp_path / "nothing", out_dir, "cutedsl", Target("sm_90a")) == []


HEADER_PY = '''
"""Its CUDA is in the .cu beside it, which includes a header from its own folder."""
from pathlib import Path

from torch.utils.cpp_extension import load


def kernel(a, b):
    return load("with_header", sources=[str(Path(__file__).with_suffix(".cu"))]).vector_add(a, b)
'''
HEADER_CU = '''
#include "add4.cuh"
'''
ADD4_CUH = '''
extern "C" __global__ void add4_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
'''


@needs_nvcc
def test_editing_an_included_header_is_a_rebuild_not_a_cache_hit(store, tmp_path):
    py = write(tmp_path / "v" / "with_header.py", HEADER_PY)
    write(tmp_path / "v" / "with_header.cu", HEADER_CU)
    header = write(tmp_path / "v" / "add4.cuh", ADD4_CUH)
    first = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    rung = first.rung("compile")
    assert rung.ok, rung.line() + (rung.details or "")
    assert rung.figures["cache"] == "miss"
    assert [r["case"] for r in rung.figures["per_kernel"]] == ["with_header:add4_kernel"]
    write(header, ADD4_CUH.replace("b[i];", "b[i] + typo_here;"))
    second = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    rung = second.rung("compile")
    assert rung.error_type == "CudaCompileError", rung.line()
    assert "typo_here" in rung.error + (rung.details or "")
    write(header, ADD4_CUH)  # back as it was: the first build, from the cache
    third = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    assert third.rung("compile").figures["cache"] == "hit"


@pytest.mark.slow  # nvcc over torch's headers
@needs_nvcc
def test_the_builtin_cu_file_with_its_kernel_in_a_header_compiles(store, tmp_path):
    """A `.cu` compiled by krung finds headers of its own folder (-I its folder)."""
    folder = tmp_path / "v"
    folder.mkdir()
    shutil.copy(SOLUTIONS / "cuda_file.py", folder / "cuda_file.py")
    cu = (SOLUTIONS / "cuda_file.cu").read_text()
    start = cu.index("__global__ void add4_kernel")
    end = cu.index("torch::Tensor vector_add")
    (folder / "add4.cuh").write_text("#pragma once\n#include <cstdint>\n" + cu[start:end])
    (folder / "cuda_file.cu").write_text(cu[:start] + '#include "add4.cuh"\n\n' + cu[end:])
    run = krung.evaluate("vector_add", folder / "cuda_file.py", store=store, device="cpu",
                         rungs="static,compile")
    rung = run.rung("compile")
    assert rung.ok, rung.line() + (rung.details or "")
    assert "cuda_file:add4_kernel" in [r["case"] for r in rung.figures["per_kernel"]]


NO_HEADERS = '''
"""load_inline without torch's headers, with a header from an include folder of its own."""
from pathlib import Path

from torch.utils.cpp_extension import load_inline

ext = load_inline("scaled", cpp_sources="", cuda_sources='#include "scale.cuh"\\n',
                  no_implicit_headers=True,
                  extra_include_paths=[str(Path(__file__).parent / "include")])


def kernel(a, b):
    return ext.vector_add(a, b)
'''


@needs_nvcc
def test_extra_include_paths_reach_nvcc_without_torchs_headers(store, tmp_path):
    py = write(tmp_path / "v" / "no_headers.py", NO_HEADERS)
    write(tmp_path / "v" / "include" / "scale.cuh", ADD4_CUH)
    run = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    rung = run.rung("compile")
    assert rung.ok, rung.line() + (rung.details or "")
    assert [r["case"] for r in rung.figures["per_kernel"]] == ["scaled:add4_kernel"]
    # artifacts without compile: on a CPU the worker never imports (and builds) it either
    run = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,artifacts")
    rung = run.rung("artifacts")
    assert rung.ok, rung.line() + (rung.details or "")
    assert rung.figures["kernels"] == 1 and "recompiled by krung" in rung.figures["source"]


FIGURES_CU = '''
__device__ __noinline__ float helper(float x) { return x * 2.f + 1.f; }

// At most 1024 threads (.maxntid), launched with 128.
extern "C" __global__ void __launch_bounds__(1024) bounded_kernel(float* x) {
    x[threadIdx.x] = helper(x[threadIdx.x]);
}

// A per-thread array indexed at run time lives in local memory: LDL/STL, yet no spill.
extern "C" __global__ void local_kernel(const float* x, float* y, const int* idx) {
    float loc[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = x[i];
    for (int j = 0; j < 64; ++j) { s = s * 1.5f + x[j]; loc[j] = s; }
    y[i] = loc[idx[i] & 63];
}

void launch(float* x, float* y, const int* idx, int blocks, int threads) {
    bounded_kernel<<<blocks, 128>>>(x);
    local_kernel<<<blocks, threads>>>(x, y, idx);
}
'''


@needs_nvcc
def test_kernel_figures_of_a_cu_file(store, tmp_path):
    """Only entry functions are kernels (not a __noinline__ helper); a literal launch block
    size wins over .maxntid; local memory is counted apart from spills."""
    py = write(tmp_path / "v" / "figures.py", BESIDE_PY)
    write(tmp_path / "v" / "figures.cu", FIGURES_CU)
    run = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    rung = run.rung("compile")
    assert rung.ok, rung.line() + (rung.details or "")
    rows = {row["case"]: row for row in rung.figures["per_kernel"]}
    assert set(rows) == {"figures:bounded_kernel", "figures:local_kernel"}
    assert rung.figures["kernels"] == 2
    assert rows["figures:bounded_kernel"]["threads_per_block"] == 128
    local = rows["figures:local_kernel"]
    assert local["threads_per_block"] is None  # a variable: unknown, not the next literal
    assert local["spill_store_bytes"] == local["spill_load_bytes"] == 0
    assert local["spills"] is False and local["local_ops"] > 0 and local["stack_bytes"] > 0


HEAVY_CU = '''
extern "C" __global__ void heavy_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[32];
    #pragma unroll
    for (int j = 0; j < 32; ++j) acc[j] = x[i + j * n];
    #pragma unroll
    for (int k = 0; k < 8; ++k)
        #pragma unroll
        for (int j = 0; j < 32; ++j) acc[j] = acc[j] * acc[(j + k + 1) & 31] + 1.f;
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < 32; ++j) s += acc[j];
    y[i] = s;
}
'''
HEAVY_PY = '''
from pathlib import Path

from torch.utils.cpp_extension import load

ext = load("heavy", sources=[str(Path(__file__).with_suffix(".cu"))],
           extra_cuda_cflags=["--maxrregcount=24"])


def kernel(a, b):
    return ext.vector_add(a, b)
'''


@pytest.mark.slow  # nvcc over torch's headers (a load()ed .cu is built as torch would)
@needs_nvcc
def test_register_and_spill_figures_follow_the_versions_ptxas_options(store, tmp_path):
    py = write(tmp_path / "v" / "heavy.py", HEAVY_PY)
    cu = write(tmp_path / "v" / "heavy.cu", HEAVY_CU)
    run = krung.evaluate("vector_add", py, store=store, device="cpu", rungs="static,compile")
    rung = run.rung("compile")
    assert rung.ok, rung.line() + (rung.details or "")
    (row,) = rung.figures["per_kernel"]
    # what nvcc itself says with the same flag
    done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v",
                           "--maxrregcount=24", str(cu), "-o", str(tmp_path / "heavy.cubin")],
                          capture_output=True, text=True, check=True)
    used = int(done.stderr.split("Used ")[1].split(" registers")[0])
    stores = int(done.stderr.split(" bytes spill stores")[0].rsplit(", ", 1)[1])
    assert row["registers"] == used <= 24
    assert row["spill_store_bytes"] == stores > 0 and row["spills"] is True
