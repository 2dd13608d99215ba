"""Listing problems by parsing and describing them from a child process."""

from __future__ import annotations

import random
import sys

import pytest

import krung
from tests.conftest import SCALE_PROBLEM, write


def test_local_problems_are_found_below_the_root(tmp_path):
    for folder in ("a", "deep/er/b", "deep/er/than/three/c", ".hidden/d", "venv/e",
                   "node_modules/f"):
        write(tmp_path / folder / "problem.py", f'description = "{folder}"\n')
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    found = {p["name"]: p for p in krung.list_problems(tmp_path) if not p["builtin"]}
    assert set(found) == {"a", "b"}
    assert found["b"] == {"name": "b", "path": str(tmp_path / "deep" / "er" / "b"),
                          "description": "deep/er/b", "builtin": False, "format": "native"}
    builtins = [p["name"] for p in krung.list_problems(tmp_path) if p["builtin"]]
    assert builtins == [name for name, _ in krung.builtin_problems()]


def test_describe_runs_the_problem_elsewhere(tmp_path):
    write(tmp_path / "noisy" / "problem.py", '    print("the problem prints")' + SCALE_PROBLEM)
    before = set(sys.modules)
    about = krung.describe_problem(tmp_path / "noisy")
    assert "torch" not in set(sys.modules) - before  # never in this process
    assert about["name"] == "noisy" and about["warnings"] == []
    assert about["example"]["returns"] == "tensor"
    assert set(about["tolerance"]["by_dtype"]) == {"float32", "bfloat16"}


def test_describe_reports_what_is_wrong(tmp_path):
    with pytest.raises(krung.UsageError, match="no problem at 'nothing_here'"):
        krung.describe_problem("nothing_here")
    write(tmp_path / "raises" / "problem.py", "raise ValueError('boom')\n")
    with pytest.raises(krung.ProblemError, match="raised ValueError: boom") as caught:
        krung.describe_problem(tmp_path / "raises")
    assert caught.value.hint.startswith("fix ")
    missing = f"krung_absent_{random.randrange(1 << 30)}"  # as level-3 Mamba2 without einops
    write(tmp_path / "needs" / "problem.py", f"import torch\nimport {missing}.ops\n")
    with pytest.raises(krung.ProblemError, match=f"No module named '{missing}'") as caught:
        krung.describe_problem(tmp_path / "needs")
    assert f"install `{missing}` where krung runs" in caught.value.hint
    assert f"-m pip install {missing};" in caught.value.hint and "problem.py:2" in caught.value.hint
