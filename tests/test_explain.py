"""Errors from versions are explained at the version's own line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from krung.worker.explain import explain
from tests.conftest import write

BAD_TRITON = """
import triton
import triton.language as tl


@triton.jit
def bad(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.dot(x, x)
    tl.store(x_ptr + offs, y, mask=offs < n)
"""


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_triton_compile_error_points_at_the_versions_line(tmp_path):
    """Compiles for sm_90 without a GPU; Triton reports lines relative to the @jit function."""
    pytest.importorskip("triton")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = write(tmp_path / "bad_kernel.py", BAD_TRITON)
    module = _import(path)
    source = ASTSource(fn=module.bad, signature={"x_ptr": "*fp32", "n": "i32",
                                                 "BLOCK": "constexpr"},
                       constexprs={"BLOCK": 128})
    with pytest.raises(Exception) as info:
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
    facts = explain(info.value, path, "call")
    assert facts["kind"] == "compile"
    assert facts["type"] == "CompilationError"
    assert facts["location"] == f"{path}:9"
    assert "ranks" in facts["message"]
    assert "tl.dot(x, x)" in facts["details"]


def test_runtime_error_names_the_innermost_line_of_the_version(tmp_path):
    path = write(tmp_path / "v.py", """
        def helper(x):
            return x.reshape(7, -1)

        def kernel(x):
            return helper(x) + 1
    """)
    module = _import(path)
    import torch

    with pytest.raises(RuntimeError) as info:
        module.kernel(torch.ones(10))
    facts = explain(info.value, path, "call")
    assert facts["kind"] == "runtime"
    assert facts["location"] == f"{path}:2"
    assert "x.reshape(7, -1)" in facts["details"]
    assert "^" in facts["details"]


def test_syntax_error_on_import_is_a_compile_error(tmp_path):
    path = write(tmp_path / "v.py", "def kernel(x):\n    return x +\n")
    with pytest.raises(SyntaxError) as info:
        _import(path)
    facts = explain(info.value, path, "load")
    assert facts["kind"] == "compile" and facts["location"] == f"{path}:2"


def test_known_errors_get_a_hint(tmp_path):
    path = tmp_path / "v.py"
    facts = explain(ModuleNotFoundError("No module named 'cupy'"), path, "load")
    assert facts["kind"] == "load"
    assert "pip install cupy" in facts["hint"]


LIBRARY_CALL = """
import triton
import triton.language as tl


@triton.jit
def swish(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=offs < n)
"""


def test_a_compile_error_inside_a_library_call_says_the_reason_not_its_position(tmp_path):
    """tl.sigmoid on a half type fails in triton.language's own function: Triton's error at
    the version's line wraps one whose text begins "at 2:20:"; the message is the reason."""
    pytest.importorskip("triton")
    import random

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    dtype = random.choice(["bf16", "fp16"])
    path = write(tmp_path / "swish.py", LIBRARY_CALL)
    source = ASTSource(fn=_import(path).swish,
                       signature={"x_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "n": "i32",
                                  "BLOCK": "constexpr"}, constexprs={"BLOCK": 256})
    with pytest.raises(Exception) as info:
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
    facts = explain(info.value, path, "call")
    assert facts["type"] == "CompilationError" and facts["location"] == f"{path}:9"
    assert "Expected dtype" in facts["message"] and dtype in facts["message"], facts
    assert "tl.sigmoid(x)" in facts["details"] and "def sigmoid" in facts["details"]
