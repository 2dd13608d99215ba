"""A file beside a version named after a module it imports (triton.py, torch.py, numpy.py):
the static rung refuses it before anything runs, and a worker error it causes names it."""

from __future__ import annotations

import pytest

from krung.worker.explain import shadowing
from tests.conftest import write

pytestmark = pytest.mark.newest  # also with the newest packages (make test-newest)

USES_TRITON = """
import torch
import triton
import triton.language as tl

def kernel(x):
    return x * 2 + 1
"""
USES_NUMPY = """
import numpy as np
import torch

def kernel(x):
    return torch.from_numpy(np.asarray(x) * 2 + 1)
"""
USES_HELPER = """
import torch
from scale_helpers import twice

def kernel(x):
    return twice(x) + 1
"""


def rung(result, name):
    return next(r for r in result.json()["rungs"] if r["name"] == name)


@pytest.mark.parametrize("module, source", [("triton", USES_TRITON), ("numpy", USES_NUMPY),
                                            ("torch", USES_TRITON)])
def test_the_static_rung_names_the_file_that_hides_a_module(
        krung, scale_problem, tmp_path, module, source):
    pytest.importorskip(module)
    folder = tmp_path / "versions"
    version = write(folder / "v1.py", source)
    write(folder / f"{module}.py", "print('a scratch file')\n")
    result = krung("run", scale_problem, version, "--rungs", "static,compile", "--json")
    assert result.code == 1, result.stderr
    static = rung(result, "static")
    assert static["error_type"] == "ShadowedModule"
    assert f"imports `{module}`, but {module}.py beside the version hides" in static["error"]
    assert str(folder / f"{module}.py") in static["hint"] and "rename it" in static["hint"]
    line = next(i for i, text in enumerate(source.splitlines())
                if text.startswith(f"import {module}"))
    assert static["location"] == f"{version}:{line}"
    assert rung(result, "compile")["status"] == "skipped"


def test_a_version_named_after_the_module_it_imports_is_refused(krung, scale_problem,
                                                               tmp_path):
    pytest.importorskip("triton")
    version = write(tmp_path / "versions" / "triton.py", USES_TRITON)
    static = rung(krung("run", scale_problem, version, "--rungs", "static", "--json"), "static")
    assert static["error_type"] == "ShadowedModule"
    assert "the version's own name hides the real `triton`" in static["error"]


def test_the_worker_explains_the_import_error_the_file_causes(krung, scale_problem, tmp_path):
    """Without the static rung (--rungs compile), the import fails in the worker as Python
    says it ("'triton' is not a package"), and the hint names the file and the fix."""
    pytest.importorskip("triton")
    folder = tmp_path / "versions"
    version = write(folder / "v1.py", USES_TRITON)
    write(folder / "triton.py", "print('a scratch file')\n")
    compiled = rung(krung("run", scale_problem, version, "--rungs", "compile", "--json"),
                    "compile")
    assert compiled["status"] == "failed"
    assert "'triton' is not a package" in compiled["error"]
    assert compiled["hint"].startswith(f"{folder / 'triton.py'} has the name of the module")


def test_a_helper_beside_the_version_is_its_own_module(krung, scale_problem, tmp_path):
    folder = tmp_path / "versions"
    version = write(folder / "v1.py", USES_HELPER)
    write(folder / "scale_helpers.py", "def twice(x):\n    return x * 2\n")
    result = krung("run", scale_problem, version, "--rungs", "static,compile,run,correctness")
    assert result.code == 0, result.stdout + result.stderr


def test_what_counts_as_shadowing(tmp_path):
    for name in ("json", "numpy", "sys", "scale_helpers"):
        write(tmp_path / f"{name}.py", "x = 1\n")
    write(tmp_path / "torch" / "__init__.py", "x = 1\n")
    assert shadowing("json", tmp_path) == tmp_path / "json.py"  # the standard library
    assert shadowing("numpy", tmp_path) == tmp_path / "numpy.py"  # installed
    assert shadowing("torch", tmp_path) == tmp_path / "torch" / "__init__.py"  # a package
    assert shadowing("sys", tmp_path) is None  # built into Python: always the real one
    assert shadowing("scale_helpers", tmp_path) is None  # only here: the version's own helper
    assert shadowing("csv", tmp_path) is None  # no such file here
