"""Which format a problem is in, found from its files without importing anything; the error
when it is in none; listing and describing problems of every format."""

from __future__ import annotations

import sys

import pytest

import krung
from krung.judge.problem import detect_format, find_problem, problem_name
from tests.conftest import GPUMODE, KERNELBENCH, PROBLEMS, write


def test_each_format_is_detected_by_its_files():
    before = set(sys.modules)
    assert detect_format(find_problem(KERNELBENCH / "1_ReLU.py")) == "kernelbench"
    assert detect_format(find_problem(GPUMODE / "vectoradd_py")) == "gpumode"
    assert find_problem(GPUMODE / "vectoradd_py" / "task.yml") == (GPUMODE / "vectoradd_py")
    assert detect_format(find_problem(PROBLEMS / "softmax")) == "native"
    assert detect_format(find_problem("softmax")) == "native"
    assert problem_name(find_problem(KERNELBENCH / "3_Linear.py")) == "3_Linear"
    assert problem_name(find_problem(GPUMODE / "matmul_py")) == "matmul_py"
    assert "torch" not in set(sys.modules) - before  # parsed, never imported


def test_history_names_carry_the_path_precision_and_scale(tmp_path):
    from krung.judge.problem import history_name, parse_identity

    relu = KERNELBENCH / "1_ReLU.py"
    assert problem_name(relu, "bf16", 0.1) == "1_ReLU@bf16@scale0.1"
    assert problem_name(GPUMODE / "vectoradd_py", None, 0.5) == "vectoradd_py@scale0.5"
    assert history_name(str(relu)) == f"1_ReLU ({relu.resolve()})"
    assert history_name(f"{relu}@bf16@scale0.1") == f"1_ReLU@bf16@scale0.1 ({relu.resolve()})"
    assert parse_identity(history_name(f"{relu}@scale0.25")) == ("1_ReLU@scale0.25",
                                                                 str(relu.resolve()))
    assert history_name("1_ReLU@bf16") == "1_ReLU@bf16"  # a name, for the store to resolve
    assert parse_identity("1_ReLU@bf16") == ("1_ReLU@bf16", None)
    # a folder name that holds an @ stays whole
    odd = tmp_path / "at@home"
    odd.mkdir()
    assert history_name(str(odd)) == f"at@home ({odd.resolve()})"


def test_a_file_in_no_format_names_what_was_looked_for(tmp_path):
    almost = write(tmp_path / "almost.py", """
        import torch
        class Model(torch.nn.Module):
            pass
        def get_inputs():
            return [torch.randn(3)]
    """)
    with pytest.raises(krung.UsageError) as caught:
        find_problem(almost)
    assert "no `def get_init_inputs` at module level" in caught.value.message
    assert "GPU MODE: a directory holding reference.py and task.yml" in caught.value.hint
    assert "problem.py" in caught.value.hint

    write(tmp_path / "half" / "reference.py", "def ref_kernel(data):\n    return data\n")
    with pytest.raises(krung.UsageError, match=r"has reference\.py but not the other") as caught:
        find_problem(tmp_path / "half")
    assert "KernelBench: a .py file defining `class Model`" in caught.value.hint

    notes = write(tmp_path / "notes.txt", "not a problem\n")
    with pytest.raises(krung.UsageError, match="not a KernelBench problem file"):
        find_problem(notes)


def test_the_command_reports_a_path_in_no_format(krung, tmp_path, version):
    write(tmp_path / "empty_dir" / "README.md", "nothing here\n")
    result = krung("run", tmp_path / "empty_dir", version("v", "def kernel(x):\n    return x\n"))
    assert result.code == 2
    assert "UsageError:" in result.stderr and "is not a problem directory" in result.stderr
    assert "hint: looked for krung's format" in result.stderr


def test_problems_of_every_format_are_listed(tmp_path):
    import shutil

    shutil.copytree(GPUMODE, tmp_path / "gpumode")
    # a KernelBench file beside a helper that only looks like one
    write(tmp_path / "kb" / "helpers.py", "def get_init_inputs():\n    return []\n")
    shutil.copy(KERNELBENCH / "2_RowSoftmax.py", tmp_path / "kb" / "2_RowSoftmax.py")
    found = {p["name"]: p for p in krung.list_problems(tmp_path) if not p["builtin"]}
    assert {n: p["format"] for n, p in found.items()} == {
        "matmul_py": "gpumode", "rowsoftmax_py": "gpumode", "vectoradd_py": "gpumode",
        "prefixsum_py": "gpumode", "dither_py": "gpumode", "2_RowSoftmax": "kernelbench"}
    assert found["vectoradd_py"]["description"].startswith("Add two float32 matrices")
    assert found["2_RowSoftmax"]["description"].startswith("Softmax over the last dimension")


def test_describe_a_kernelbench_problem():
    about = krung.describe_problem(KERNELBENCH / "3_Linear.py")
    assert about["format"] == "kernelbench" and about["name"] == "3_Linear"
    assert "class ModelNew(torch.nn.Module)" in about["entry_point"]
    assert about["reference"]["parameters"] == ["x"]
    assert "self.linear = nn.Linear" in about["reference"]["source"]
    assert about["test_cases"][0]["case"] == {"batch_size": 24, "dtype": "float32"}
    assert about["example"]["inputs"][0]["shape"] == [24, 64]
    assert about["tolerance"]["by_dtype"]["float32"]["atol"] == 1e-4


def test_describe_a_gpumode_problem():
    about = krung.describe_problem(GPUMODE / "rowsoftmax_py")
    assert about["format"] == "gpumode" and about["ranking_by"] == "mean"
    assert "def custom_kernel(data)" in about["entry_point"]
    assert about["problem_file"].endswith("rowsoftmax_py/reference.py")
    assert about["test_cases"][0]["case"] == {"rows": 1, "cols": 7}  # krung draws the seed
    data = about["example"]["inputs"][0]
    assert data["type"] == "dict" and data["items"]["x"]["shape"] == [1, 7]
    assert data["items"]["temperature"] == {"type": "float", "value": "0.75"}
    assert "the problem's own check decides" in about["tolerance"]["rule"]



# One output buffer kept by the version and returned by every call (a CUDA graph's static
# output; GPU MODE's torch.compile(mode="reduce-overhead") solutions), in each format. The
# checked calls copy each call's output before the next, so they accept it; the timed calls
# rotate over input sets, so each set's last output was the next set's (pmpp/sort_py and
# pmpp/vectorsum_py's own solutions failed the benchmark rung at declared sizes, TimedMismatch).
KEPT_BUFFER = """
import torch
import torch.nn as nn

BUFFER = {{}}


def into_the_buffer(y):
    kept = BUFFER.get((y.dtype, y.device))
    if kept is None or kept.numel() < y.numel() + {slack}:
        kept = torch.empty(y.numel() + {slack}, dtype=y.dtype, device=y.device)
        BUFFER[(y.dtype, y.device)] = kept
    return kept[:y.numel()].view(y.shape).copy_(y)
"""
ONE_BUFFER = {
    "native": ("scale", """
def kernel(x):
    return into_the_buffer(x * 2 + 1)
"""),
    "kernelbench": ("1_ReLU.py", """
class ModelNew(nn.Module):
    def forward(self, x):
        return into_the_buffer(torch.relu(x))
"""),
    "gpumode": ("rowsoftmax_py", """
def custom_kernel(data):
    return into_the_buffer(torch.softmax(data["x"] / data["temperature"], dim=-1))
"""),
}


@pytest.mark.parametrize("problem_format", sorted(ONE_BUFFER))
def test_the_benchmark_takes_an_output_buffer_that_every_call_returns(
        krung, scale_problem, version, problem_format):
    import random

    where, entry = ONE_BUFFER[problem_format]
    problem = {"native": scale_problem, "kernelbench": KERNELBENCH / where,
               "gpumode": GPUMODE / where}[problem_format]
    # the buffer outgrows the output by a random margin: a view of it is returned
    source = KEPT_BUFFER.format(slack=random.randint(0, 64)) + entry
    result = krung("run", problem, version("one_buffer", source), "--json", "--rungs",
                   "static,compile,run,correctness,benchmark")
    assert result.code == 0, result.stdout + result.stderr
    bench = next(r for r in result.json()["rungs"] if r["name"] == "benchmark")
    assert all(row["outputs_reused"] for row in bench["figures"]["per_case"]), bench
