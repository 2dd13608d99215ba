"""The SASS, ptxas and cuobjdump parsers on real outputs made here, and the occupancy
arithmetic against the CUDA occupancy calculator's rules."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from krung.judge.rungs.artifacts import resources, sass, tools

KERNELS = r"""
#include <mma.h>
using namespace nvcuda;

// Indexes a local array with a run-time value: it lives in local memory (STL/LDL).
__global__ void local_array(const int* idx, float* out, int n) {
    float scratch[64];
    for (int k = 0; k < 64; ++k) scratch[k] = k * out[k % n];
    out[threadIdx.x] = scratch[idx[threadIdx.x] & 63];
}

// One 16x16x16 half-precision product on the tensor cores (HMMA).
__global__ void wmma_tile(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

__global__ void __launch_bounds__(128) half_loads(const unsigned short* x, unsigned short* y) {
    y[threadIdx.x] = x[threadIdx.x] + 1;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    nvcc, ptxas, cuobjdump = tools.find("nvcc"), tools.find("ptxas"), tools.find("cuobjdump")
    if nvcc is None or ptxas is None or cuobjdump is None:
        pytest.skip("needs nvcc, ptxas and cuobjdump (the CUDA toolkit or Triton's package)")
    folder = tmp_path_factory.mktemp("cuda")
    (folder / "k.cu").write_text(KERNELS)
    tools.run(nvcc, ["-ptx", "-arch=sm_90a", "k.cu", "-o", "k.ptx"], cwd=folder)
    report = tools.run(ptxas, ["-v", "-arch=sm_90a", "k.ptx", "-o", "k.cubin"], cwd=folder)
    return {
        "ptx": (folder / "k.ptx").read_text(),
        "ptxas": report.stderr + report.stdout,
        "sass": tools.run(cuobjdump, ["-sass", "k.cubin"], cwd=folder).stdout,
        "res": tools.run(cuobjdump, ["-res-usage", "k.cubin"], cwd=folder).stdout,
    }


def _by_name(found: dict, name: str) -> dict:
    return next(v for k, v in found.items() if name in k)


def test_sass_sections_and_instruction_mix(built):
    functions = sass.split_functions(sass.clean(built["sass"]))
    assert len(functions) == 3
    local = sass.mix(_by_name(functions, "local_array"))
    assert local["local_stores"] > 0 and local["local_loads"] > 0
    wmma = sass.mix(_by_name(functions, "wmma_tile"))
    assert wmma["tensor_core"].get("HMMA", 0) >= 1 and wmma["tensor_core_total"] >= 1
    assert "HMMA x" in sass.highlights(wmma)
    halves = sass.mix(_by_name(functions, "half_loads"))
    assert halves["ldg"] == {"16": 1} and halves["stg"] == {"16": 1}
    # The kept text has no encodings, and a diff compares instructions without addresses.
    assert "0x000" not in sass.clean(built["sass"]).split("Function")[1].split("\n", 3)[2]
    lines = sass.without_addresses(_by_name(functions, "half_loads"))
    assert lines and all(not line.startswith("/*") for line in lines)
    assert any(line.startswith("LDG.E.U16") for line in lines)


def test_ptxas_report_and_cubin_resources_agree(built):
    report = resources.parse_ptxas(built["ptxas"])
    usage = resources.parse_res_usage(built["res"])
    assert set(report) == set(usage) and len(usage) == 3
    for symbol, figures in usage.items():
        assert figures["registers"] == report[symbol]["registers"] > 0
    local = _by_name(report, "local_array")
    assert local["stack_bytes"] >= 256  # float scratch[64]
    assert _by_name(usage, "local_array")["stack_bytes"] == local["stack_bytes"]


def test_ptx_block_size_from_launch_bounds(built):
    from krung.judge.rungs.artifacts.inspect import _ptx_block_sizes

    sizes = _ptx_block_sizes(built["ptx"])
    assert _by_name(sizes, "half_loads") == 128
    assert not any("wmma_tile" in name for name in sizes)


@pytest.mark.skipif(shutil.which("c++filt") is None and shutil.which("cu++filt") is None,
                    reason="needs c++filt")
def test_demangled_names():
    names = tools.demangle(["_Z10add_kernelPKfS0_Pfi", "softmax_kernel"])
    assert tools.short_name(names["_Z10add_kernelPKfS0_Pfi"]) == "add_kernel"
    assert names["softmax_kernel"] == "softmax_kernel"


def test_plain_names_without_a_demangler():
    assert tools._base_name("_Z12scale_kernelPK6float4PS_i") == "scale_kernel"
    assert tools.short_name("void mm<float, 128>(float const*, int)") == "mm"


@pytest.mark.parametrize(("registers", "threads", "smem", "blocks", "limited_by"), [
    (32, 256, 0, 8, "warps+registers"),  # 64 warps fit either way: 8 blocks of 8 warps
    (64, 256, 0, 4, "registers"),  # 2048 registers a warp: 32 warps, 4 blocks
    (255, 256, 0, 1, "registers"),  # 8192 a warp: 8 warps
    (32, 128, 48 * 1024, 4, "shared_memory"),  # 49 KiB a block with the reserved 1 KiB
    (16, 32, 0, 32, "blocks"),  # one warp a block: the 32-block limit
])
def test_occupancy_limits(registers, threads, smem, blocks, limited_by):
    found = resources.occupancy(registers, threads, smem)
    assert found["blocks_per_sm"] == blocks
    assert found["limited_by"] == limited_by
    assert found["occupancy"] == pytest.approx(blocks * threads / 32 / 64)


def test_occupancy_without_a_block_size_gives_the_register_bound():
    assert resources.occupancy(128, None, 0) == {"warps_by_registers": 16}


def test_tools_report_their_release():
    cuobjdump = tools.find("cuobjdump")
    if cuobjdump is None:
        pytest.skip("no cuobjdump")
    assert cuobjdump.version is not None and cuobjdump.version >= (11, 0)
    with pytest.raises(tools.ToolFailed, match="exited with status"):
        tools.run(cuobjdump, ["-sass", "/nonexistent.cubin"])
    assert subprocess.run([cuobjdump.path, "--version"], capture_output=True).returncode == 0


def test_launch_block_sizes_read_only_inside_the_chevrons():
    from krung.judge.rungs.artifacts.cuda_backend import launch_block_sizes

    assert launch_block_sizes("k<<<blocks, threads>>>(x, 128, n);") == {}
    assert launch_block_sizes("k<<<grid, block, 0, stream>>>(x, 64);") == {}
    assert launch_block_sizes("k<<<grid, 256, 0, stream>>>(x, 64);") == {"k": 256}
    assert launch_block_sizes("k<float><<<dim3(n, 2), dim3(16, 16)>>>(x);") == {"k": 256}
    assert launch_block_sizes("k<<<cdiv(n, 128), 128>>>(x);") == {"k": 128}


MOVES = r"""
__global__ void consts(float* x, int n) {
    int i = threadIdx.x;
    x[i] = 1.875f; x[i + n] = 0.f; x[i + 2 * n] = 2.0f; x[i + 3 * n] = 0.5f;
}
__global__ void fma_k(const float* a, float* x) { int i = threadIdx.x; x[i] = a[i] * 3.f + 1.f; }
"""


def test_a_constant_loaded_by_hfma2_mma_is_a_move_not_arithmetic(tmp_path):
    nvcc, cuobjdump = tools.find("nvcc"), tools.find("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc and cuobjdump")
    (tmp_path / "m.cu").write_text(MOVES)
    tools.run(nvcc, ["-cubin", "-arch=sm_90a", "m.cu", "-o", "m.cubin"], cwd=tmp_path)
    text = sass.clean(tools.run(cuobjdump, ["-sass", "m.cubin"], cwd=tmp_path).stdout)
    functions = sass.split_functions(text)
    moves = [op for op, args in sass.instructions(text) if op == "HFMA2.MMA"
             and args.replace(" ", "").split(",")[1:3] == ["-RZ", "RZ"]]
    assert moves, text  # ptxas loads these constants with the idiom
    consts = sass.mix(_by_name(functions, "consts"))
    assert "hfma2" not in consts and "HFMA2" not in sass.highlights(consts)
    fma = sass.mix(_by_name(functions, "fma_k"))
    assert fma["ffma"] == 1 and "hfma2" not in fma and sass.highlights(fma).startswith("FFMA x1")


def test_a_triton_specialisation_is_named_by_its_constexprs_pointer_types_and_options():
    import random

    from krung.worker.launches import specialisation_name

    a, c = random.sample(["fp16", "bf16", "fp8e4nv", "fp32"], 2)
    warps = random.choice([2, 4, 8])
    spec = {"signature": {"a_ptr": f"*{a}", "b_ptr": f"*{a}", "c_ptr": f"*{c}", "n": "i32",
                          "BLOCK": "constexpr"},
            "constexprs": ["BLOCK"], "constants": {"BLOCK": 256}, "attrs": {},
            "num_warps": warps, "num_stages": 3, "num_ctas": 1, "target": "cuda:90"}
    name = specialisation_name(spec)
    assert name.startswith(f"BLOCK=256_{a}-{c}_w{warps}s3_"), name
    other = specialisation_name({**spec, "signature": {**spec["signature"], "n": "i64"}})
    assert other != name and other.rsplit("_", 1)[0] == name.rsplit("_", 1)[0]
