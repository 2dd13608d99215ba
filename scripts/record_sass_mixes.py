"""Record the SASS instruction mixes of a few Triton kernels, compiled for sm_90a without a
GPU, as tests/data/sass_mixes.json: the fixtures from which tests/test_pipes.py checks which
compute ceiling the roofline chooses.

    PYTHONPATH=src python scripts/record_sass_mixes.py

Each kernel is compiled with `triton.compile` for GPUTarget("cuda", 90, 32), its cubin
disassembled with the cuobjdump Triton ships, and counted by krung's own
krung.judge.rungs.artifacts.sass.mix, as the artifacts rung does for a version.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from krung.judge.rungs.artifacts import sass, tools

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "sass_mixes.json"


@triton.jit
def gelu_tanh(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1 + tl.extra.cuda.libdevice.tanh(inner))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_erf(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = 0.5 * x * (1 + tl.extra.cuda.libdevice.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_exp(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


KERNELS = {  # name: (function, signature, constexprs by position, num_warps, what it is)
    "gelu_tanh_fp32": (gelu_tanh, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                                   "BLOCK": "constexpr"}, {(3,): 1024}, 4,
                       "GELU, tanh form, fp32 elementwise"),
    "gelu_erf_bf16": (gelu_erf, {"x_ptr": "*bf16", "y_ptr": "*bf16", "n": "i32",
                                 "BLOCK": "constexpr"}, {(3,): 1024}, 4,
                      "GELU, erf form, bf16 in and out, fp32 math"),
    "softmax_fp32": (softmax_exp, {"x_ptr": "*fp32", "y_ptr": "*fp32", "cols": "i32",
                                   "BLOCK": "constexpr"}, {(3,): 4096}, 8,
                     "row softmax, fp32, one row per program"),
    "vector_add_fp32": (vector_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                     "n": "i32", "BLOCK": "constexpr"}, {(4,): 1024}, 4,
                        "x + y, fp32"),
    "matmul_bf16": (matmul, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": "i32",
                             "N": "i32", "K": "i32", "BLOCK_M": "constexpr",
                             "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"},
                    {(6,): 128, (7,): 128, (8,): 64}, 8, "bf16 matmul, tl.dot"),
    "matmul_fp32": (matmul, {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "M": "i32",
                             "N": "i32", "K": "i32", "BLOCK_M": "constexpr",
                             "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"},
                    {(6,): 64, (7,): 64, (8,): 32}, 4, "fp32 matmul, tl.dot (TF32 allowed)"),
}


def mix_of(fn, signature, constexprs, num_warps) -> dict:
    kernel = triton.compile(ASTSource(fn, signature, constexprs),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        tool = tools.find("cuobjdump")
        if tool is None:
            sys.exit("no cuobjdump (install Triton, which ships one)")
        text = sass.clean(tools.run(tool, ["-sass", str(cubin)]).stdout)
    return sass.mix(text)


def main() -> None:
    recorded = {"how": "triton.compile for sm_90a (GPUTarget cuda 90), cuobjdump -sass, "
                       f"krung.judge.rungs.artifacts.sass.mix; Triton {triton.__version__}; "
                       "scripts/record_sass_mixes.py",
                "kernels": {}}
    for name, (fn, signature, constexprs, warps, what) in KERNELS.items():
        recorded["kernels"][name] = {"what": what, "sass": mix_of(fn, signature, constexprs,
                                                                  warps)}
        print(name, sass.highlights(recorded["kernels"][name]["sass"]))
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
