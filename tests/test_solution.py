"""Reading a version without importing it."""

from __future__ import annotations

import ast

import pytest

from krung.judge.solution import detect_dsl, entry_point, read_solution
from krung.protocol.errors import UsageError


@pytest.mark.parametrize("source, dsl", [
    ("import triton\nimport triton.language as tl\n", "triton"),
    ("from torch.utils.cpp_extension import load_inline\nimport triton\n", "cuda"),
    ("import cupy as cp\n", "cupy"),
    ("from numba import cuda\n", "numba"),
    ("import cutlass.cute as cute\n", "cutedsl"),
    ("import tilelang\n", "tilelang"),
    ("import torch\n", "torch"),
])
def test_detect_dsl(source, dsl):
    assert detect_dsl(ast.parse(source)) == dsl


@pytest.mark.parametrize("source, found", [
    ("def kernel(x):\n    return x\n", True),
    ("kernel = lambda x: x\n", True),
    ("from impl import fast as kernel\n", True),
    ("def kernel_v2(x):\n    return x\n", False),
    ("def outer():\n    def kernel(x):\n        return x\n", False),
])
def test_entry_point(source, found):
    assert (entry_point(ast.parse(source)) is not None) is found


def test_read_solution_hashes_the_bytes(tmp_path):
    path = tmp_path / "v.py"
    path.write_text("def kernel(x):\n    return x\n")
    solution = read_solution(path)
    assert len(solution.sha256) == 64 and solution.source.startswith("def kernel")
    with pytest.raises(UsageError):
        read_solution(tmp_path / "missing.py")
    (tmp_path / "v.cu").write_text("")
    with pytest.raises(UsageError, match="not a Python file"):
        read_solution(tmp_path / "v.cu")
