"""The calibration's pipe kernels (krung.judge.rungs.roofline.pipe_kernels) compile to the
instruction each is meant to time. NVRTC compiles them on the GPU; here nvcc compiles the
same source for sm_90 and krung's own SASS reader counts what came out."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from krung.judge.rungs.artifacts import sass, tools
from krung.judge.rungs.roofline import pipe_kernels
from krung.judge.rungs.roofline.pipe_kernels import CHAINS, PIPE_KERNELS, SMEM_STEPS, UNROLL
from tests.conftest import cuda_available

# Per pipe: the SASS opcode (base and full) it must be made of.
EXPECTED = {"fma": ("FFMA", "FFMA"), "hfma2": ("HFMA2", "HFMA2"), "mufu": ("MUFU", "MUFU.EX2"),
            "int": ("IMAD", "IMAD"), "smem": ("LDS", "LDS.128")}


@pytest.fixture(scope="module")
def functions(tmp_path_factory) -> dict[str, str]:
    nvcc, cuobjdump = shutil.which("nvcc"), tools.find("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc and cuobjdump (Triton's package ships one)")
    folder = tmp_path_factory.mktemp("pipes")
    (folder / "pipes.cu").write_text(pipe_kernels.SOURCE)
    subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-O3", "-o", str(folder / "pipes.cubin"),
                    str(folder / "pipes.cu")], check=True, capture_output=True, timeout=300)
    text = sass.clean(tools.run(cuobjdump, ["-sass", str(folder / "pipes.cubin")]).stdout)
    return sass.split_functions(text)


@pytest.mark.parametrize("pipe", PIPE_KERNELS, ids=[p.name for p in PIPE_KERNELS])
def test_each_pipe_kernel_is_made_of_its_instruction(functions, pipe):
    text = functions[pipe.kernel]
    ops = [op for op, _ in sass.instructions(text)]
    base, full = EXPECTED[pipe.name]
    mine = [op for op in ops if op.split(".")[0] == base]
    assert all(op.startswith(full) for op in mine), sorted(set(mine))
    per_turn = SMEM_STEPS if pipe.name == "smem" else CHAINS * UNROLL
    assert len(mine) >= per_turn, (pipe.name, len(mine))  # the loop body, unrolled at least once
    others = [op for op in ops if op.split(".")[0] not in (base, "NOP")]
    # the timed instruction is most of the kernel: the loop's own overhead is small
    assert len(mine) > 2 * len(others) or pipe.name == "smem", (pipe.name, len(mine), others)
    if pipe.name == "smem":  # 16 bytes a load, and the XOR of its four words per load
        lops = sum(op.startswith("LOP3") for op in ops)
        assert lops <= 2 * len(mine) + 8, (len(mine), lops)


def test_the_work_counted_per_loop_turn():
    per_turn = {p.name: p.per_turn for p in PIPE_KERNELS}
    assert per_turn == {"fma": 2 * CHAINS * UNROLL, "hfma2": 4 * CHAINS * UNROLL,
                        "mufu": CHAINS * UNROLL, "int": 2 * CHAINS * UNROLL,
                        "smem": 16 * SMEM_STEPS}
    assert SMEM_STEPS * pipe_kernels.THREADS * 16 == pipe_kernels.SMEM_WORDS * 4  # the buffer
    assert set(pipe_kernels.WHAT) == set(per_turn)


@pytest.mark.skipif(cuda_available(), reason="with a GPU, NVRTC compiles the kernels")
def test_without_a_gpu_every_pipe_says_why_it_was_not_measured():
    """Where torch cannot compile and load CUDA (here: no GPU): no rate, and the reason for
    each pipe, so the calibration puts the datasheet's figure in, marked as such."""
    failed: dict[str, str] = {}
    assert pipe_kernels.measure_pipes(132, lambda call: 1.0, failed) == {}
    assert set(failed) == set(pipe_kernels.WHAT)
    assert len(set(failed.values())) == 1
    assert failed["fma"].startswith("not measured: NVRTC through torch failed (")
