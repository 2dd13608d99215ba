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
