"""`krung init`: workspaces made by the real command, and the loop run inside them."""

from __future__ import annotations

import ast
import json
import random
import shutil
import sys

import pytest

from krung.host.workspace import reference_signature
from tests.conftest import GPUMODE, KERNELBENCH, PROBLEMS, SCALE_PROBLEM, write
from tests.test_report import run_next, summary_of


@pytest.mark.over_budget  # the whole default ladder under Triton's interpreter
def test_default_workspace_holds_the_template_and_its_first_version_passes(krung, tmp_path):
    made = krung("init", "silu_ws")
    assert made.code == 0, made.stderr
    ws = tmp_path / "silu_ws"
    for name in ("silu_ws/problem.py", "versions/v1.py", "AGENTS.md", "CLAUDE.md", ".mcp.json",
                 "context/INDEX.md", ".gitignore"):
        assert (ws / name).is_file(), name
    assert "next: cd silu_ws && krung run silu_ws versions/v1.py" in made.stdout

    # The loop as AGENTS.md tells it, run from the workspace: the first version passes.
    result = krung("run", "silu_ws", "versions/v1.py", "--json", cwd=ws)
    assert result.code == 0, result.stdout + result.stderr
    run = result.json()
    assert run["ok"] and run["problem"] == "silu_ws"
    assert [r["name"] for r in run["rungs"]] == ["static", "compile", "run", "correctness",
                                                 "determinism", "benchmark", "artifacts",
                                                 "roofline"]
    assert run["rungs"][0]["figures"]["dsl"] == "triton"
    history = krung("history", "silu_ws", "--json", cwd=ws)
    assert [r["run_id"] for r in history.json()] == [run["run_id"]]


def test_agents_md_gives_the_loop_the_commands_and_the_rules(krung, tmp_path):
    assert krung("init", "ws", "--problem", "softmax").code == 0
    text = (tmp_path / "ws" / "AGENTS.md").read_text()
    for command in ("krung run softmax versions/v1.py --format agent",
                    "krung run softmax versions/v2.py --rungs static,compile,run,correctness",
                    "krung history softmax", "krung best softmax", "krung show RUN",
                    "krung run softmax versions/v2.py --parent RUN_OF_V1 --format agent",
                    "krung report softmax -o report.html",
                    "krung context search", "krung watch softmax versions/v2.py",
                    "krung context add --package triton"):
        assert command in text, command
    for words in ("static -> compile -> run -> correctness -> determinism -> benchmark -> "
                  "artifacts -> roofline; on request: profile, trace", "hint:",
                  "`passed`, `failed` or `error`", "ERROR\n  (krung failed, not your version)",
                  "OK with unchecked paths", "`next: COMMAND  # why`",
                  "compile ok (but its first call raised", "KRUNG_CPU_CHECK_BUDGET",
                  "median_us", "ref_median_us / median_us", "interpreter", "cpu-wall",
                  "Roofline", "verdict=at-roofline", "SuspectTime", "Nsight Compute", "Never edit anything under `softmax/`",
                  "torch.matmul", "Write each version as a new file",
                  "Re-check correctness for every version", "kernel(x)",
                  "[mcp_servers.krung]", ".cursor/mcp.json"):
        assert words in text, words
    claude = (tmp_path / "ws" / "CLAUDE.md").read_text()
    assert "@AGENTS.md" in claude
    mcp = json.loads((tmp_path / "ws" / ".mcp.json").read_text())
    # the Python krung runs under, not a bare `krung` a venv's PATH may lack (test_mcp.py
    # starts the server from it)
    assert mcp == {"mcpServers": {"krung": {"command": sys.executable,
                                            "args": ["-m", "krung", "mcp"]}}}
    assert f"command = {json.dumps(sys.executable)}" in text
    assert 'args = ["-m", "krung", "mcp"]' in text
    index = (tmp_path / "ws" / "context" / "INDEX.md").read_text()
    assert "krung context search QUERY" in index and "No entries yet" in index


def test_builtin_problem_is_copied_without_its_solutions(krung, tmp_path):
    assert krung("init", "ws", "--problem", "rmsnorm").code == 0
    problem = tmp_path / "ws" / "rmsnorm"
    assert (problem / "problem.py").read_text() == (PROBLEMS / "rmsnorm" / "problem.py").read_text()
    assert not (problem / "solutions").exists()
    version = (tmp_path / "ws" / "versions" / "v1.py").read_text()
    assert "def kernel(x, w):" in version
    assert "NotImplementedError" in version


def test_triton_skeleton_compiles_and_its_first_call_says_what_to_fill_in(krung, tmp_path):
    assert krung("init", "ws", "--problem", "softmax").code == 0
    result = krung("run", "softmax", "versions/v1.py", "--rungs", "static,compile,run", "--json",
                   cwd=tmp_path / "ws")
    assert result.code == 1
    static, compile_, run = result.json()["rungs"]
    assert static["status"] == "ok" and static["figures"]["dsl"] == "triton"
    assert compile_["status"] == "ok"  # it imports; the first call's error is the run rung's
    # ... and its line says the call raised, first (`[compile] ok` alone reads as "it runs")
    assert next(iter(compile_["figures"].items())) == (
        "first_call", "raised NotImplementedError: the run rung reports it")
    shown = krung("show", result.json()["run_id"], "--format", "agent").stdout
    assert "rungs: static ok, compile ok (but its first call raised NotImplementedError: the " \
        "run rung reports it), run FAILED" in shown
    assert run["error_type"] == "NotImplementedError"
    assert "versions/v2.py" in run["error"]
    lines = (tmp_path / "ws" / "versions" / "v1.py").read_text().splitlines()
    raise_line = next(i for i, line in enumerate(lines, 1) if "raise NotImplementedError" in line)
    assert run["location"].endswith(f"v1.py:{raise_line}")


@pytest.mark.parametrize("dsl, imports", [
    ("cuda", "from torch.utils.cpp_extension import load_inline"),
    ("cutedsl", "import cutlass.cute as cute"),
    ("tilelang", "import tilelang.language as T"),
])
def test_other_dsls_get_a_skeleton_that_parses_and_is_recognised(krung, tmp_path, dsl, imports):
    for name, problem_args, folder in (("template", (), "template"),
                                       ("builtin", ("--problem", "matmul"), "matmul")):
        assert krung("init", name, "--dsl", dsl, *problem_args).code == 0
        source = (tmp_path / name / "versions" / "v1.py").read_text()
        compile(source, "v1.py", "exec")  # valid Python, whatever the DSL
        tree = ast.parse(source)
        doc = ast.get_docstring(tree)
        assert "How it runs" in doc and "What krung checks" in doc
        assert imports in source
        static = krung("run", folder, "versions/v1.py", "--rungs", "static", "--json",
                       cwd=tmp_path / name)
        assert static.code == 0, static.stdout + static.stderr
        assert static.json()["rungs"][0]["figures"]["dsl"] == dsl
    assert "def kernel(x):\n    return silu(x)" in (tmp_path / "template/versions/v1.py").read_text()
    assert "def kernel(a, b):" in (tmp_path / "builtin/versions/v1.py").read_text()


def test_from_path_copies_a_problem_directory(krung, tmp_path, scale_problem):
    (scale_problem / "solutions").mkdir()
    (scale_problem / "solutions" / "answer.py").write_text("def kernel(x):\n    return x\n")
    (scale_problem / "helpers.py").write_text("SCALE = 2\n")
    made = krung("init", "ws", "--from", scale_problem)
    assert made.code == 0, made.stderr
    assert "copy of" in made.stdout
    problem = tmp_path / "ws" / "scale"
    assert (problem / "problem.py").is_file() and (problem / "helpers.py").is_file()
    assert not (problem / "solutions").exists()


def test_init_refuses_a_non_empty_directory_and_bad_arguments(krung, tmp_path, scale_problem):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine\n")
    result = krung("init", "busy")
    assert result.code == 2
    assert "busy is not empty (1 entries: notes.txt)" in result.stderr
    assert "hint: choose a new directory" in result.stderr
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]

    (tmp_path / "empty").mkdir()
    assert krung("init", "empty").code == 0  # an empty directory is fine

    twice = krung("init", "a", "--problem", "softmax", "--problem", "softmax")
    assert twice.code == 2 and "two problems would share the folder softmax" in twice.stderr
    dsl = krung("init", "b", "--dsl", "cobol")
    assert dsl.code == 2 and "hint: choose one of: triton, cuda, cutedsl, tilelang" in dsl.stderr
    missing = krung("init", "c", "--problem", "softmaxx")
    assert missing.code == 2 and "no built-in problem named 'softmaxx'" in missing.stderr
    nowhere = krung("init", "d", "--from", tmp_path / "nowhere")
    assert nowhere.code == 2 and "no problem directory at" in nowhere.stderr
    assert not any((tmp_path / n).exists() for n in "abcd")


def test_reference_signature_is_read_without_importing(tmp_path):
    path = tmp_path / "problem.py"
    path.write_text("import not_installed_anywhere\n\ndef reference(q, k, v, /, *rest):\n"
                    "    return q\n")
    assert reference_signature(path) == "q, k, v, *rest"
    path.write_text("reference = print\n")
    assert reference_signature(path) == "*inputs"


def test_workspaces_name_their_problem_and_keep_their_runs_apart(krung, tmp_path):
    """Two workspaces of one problem share a store: each run is recorded under the problem's
    name and the path it ran from, so their histories stay apart, and the bare name asks
    which one is meant."""
    for ws in ("one", "two"):
        assert krung("init", ws, "--problem", "vector_add").code == 0
        assert (tmp_path / ws / "vector_add" / "problem.py").is_file()
        assert not (tmp_path / ws / "problem").exists()
    version = PROBLEMS / "vector_add" / "solutions" / "triton_blocked.py"
    ran = {}
    for ws in ("one", "two"):
        result = krung("run", "vector_add", version, "--rungs", "static,compile,run", "--json",
                       cwd=tmp_path / ws)
        assert result.code == 0, result.stdout + result.stderr
        ran[ws] = result.json()
        assert ran[ws]["problem"] == "vector_add" and ran[ws]["parent"] is None
    for ws in ("one", "two"):
        history = krung("history", "vector_add", "--json", cwd=tmp_path / ws)
        assert [r["run_id"] for r in history.json()] == [ran[ws]["run_id"]]
    ambiguous = krung("history", "vector_add", "--json", cwd=tmp_path)
    assert ambiguous.code == 2
    error = ambiguous.json()  # with --json, errors are one JSON object on stdout too
    assert error["error_type"] == "UsageError"
    assert "2 problems named vector_add have runs" in error["error"]
    assert str(tmp_path / "one" / "vector_add") in error["error"]


def test_a_workspace_of_several_problems_runs_each_as_printed(krung, tmp_path, store):
    made = krung("init", "ws", "--problem", "softmax", "--problem", "rmsnorm")
    assert made.code == 0, made.stderr
    ws = tmp_path / "ws"
    for name in ("softmax/problem.py", "rmsnorm/problem.py", "versions/softmax/v1.py",
                 "versions/rmsnorm/v1.py", "AGENTS.md"):
        assert (ws / name).is_file(), name
    assert "def kernel(x, w):" in (ws / "versions/rmsnorm/v1.py").read_text()
    skeleton = (ws / "versions/softmax/v1.py").read_text()
    assert "versions/softmax/v1.py is a skeleton" in skeleton and "versions/softmax/v2.py" in skeleton
    text = (ws / "AGENTS.md").read_text()
    assert text.startswith("# AGENTS.md: softmax, rmsnorm in Triton")
    for words in ("for 2 problems", "The task of softmax: ", "The task of rmsnorm: ",
                  "`kernel(x, w)`", "krung run softmax versions/softmax/v1.py --format agent",
                  "krung run rmsnorm versions/rmsnorm/v1.py --format agent",
                  "Never edit anything under `softmax/`, `rmsnorm/`"):
        assert words in text, words
    # a `next:` line per problem; the second problem's runs as printed, from where init ran
    lines = [line for line in made.stdout.splitlines() if line.startswith("next: ")]
    assert lines == ["next: cd ws && krung run softmax versions/softmax/v1.py --format agent",
                     "next: cd ws && krung run rmsnorm versions/rmsnorm/v1.py --format agent"]
    result = run_next(lines[1], tmp_path, store)
    assert result.code == 1, result.stdout + result.stderr  # a skeleton: raises
    summary = summary_of(result.stdout).splitlines()
    assert summary[0].startswith("FAILED at run ") and "problem rmsnorm " in summary[0]
    assert summary[-1].startswith("next: krung run rmsnorm versions/rmsnorm/v1.py --format "
                                  "agent  # fix the NotImplementedError")


def test_from_a_folder_of_problems_copies_each(krung, tmp_path):
    names = random.sample(["alpha", "beta", "gamma", "delta"], 2)
    for name in names:
        write(tmp_path / "many" / name / "problem.py", SCALE_PROBLEM)
    (tmp_path / "many" / "notes").mkdir()  # no problem.py: not a problem
    made = krung("init", "ws", "--from", tmp_path / "many")
    assert made.code == 0, made.stderr
    for name in names:
        assert (tmp_path / "ws" / name / "problem.py").read_text() == \
            (tmp_path / "many" / name / "problem.py").read_text()
        assert (tmp_path / "ws" / "versions" / name / "v1.py").is_file()
        assert f"krung run {name} versions/{name}/v1.py --format agent" in made.stdout
    assert not (tmp_path / "ws" / "notes").exists()


def test_a_folder_of_kernelbench_and_gpumode_problems_makes_a_workspace(krung, tmp_path, store):
    source = tmp_path / "sets"
    chosen = sorted(random.sample(["1_ReLU", "3_Linear", "4_LayerNorm"], 2))
    for name in chosen:
        write(source / f"{name}.py", (KERNELBENCH / f"{name}.py").read_text())
    shutil.copytree(GPUMODE / "vectoradd_py", source / "vectoradd_py")
    shutil.copyfile(GPUMODE / "utils.py", source / "utils.py")  # its task.yml: ../utils.py
    write(source / "notes.py", "x = 1\n")  # neither format: not a problem
    write(source / f"{chosen[0]}.krung.yml", "forbid_ops: [bmm]\n")  # its policy sidecar
    made = krung("init", "ws", "--from", source)
    assert made.code == 0, made.stderr
    ws = tmp_path / "ws"
    for name in chosen:
        assert (ws / f"{name}.py").read_text() == (source / f"{name}.py").read_text()
        first = (ws / "versions" / name / "v1.py").read_text()
        assert "class ModelNew(" in first and "class Model(" not in first
    assert (ws / f"{chosen[0]}.krung.yml").read_text() == "forbid_ops: [bmm]\n"
    assert (ws / "utils.py").read_text() == (GPUMODE / "utils.py").read_text()
    assert not (ws / "vectoradd_py" / "submission.py").exists()  # GPU MODE's example answer
    first = (ws / "versions" / "vectoradd_py" / "v1.py").read_text()
    assert "def custom_kernel(data" in first
    assert "def generate_input" not in first and "def ref_kernel" not in first
    assert not (ws / "notes.py").exists()
    text = (ws / "AGENTS.md").read_text()
    for words in (f"`{chosen[0]}.py`, `{chosen[1]}.py` (KernelBench's format)",
                  "`vectoradd_py/` (GPU MODE's format)", f"1. Read `{chosen[0]}.py`, then",
                  "defines `class ModelNew(nn.Module)`", "defines `custom_kernel(data)`",
                  f"krung run {chosen[1]}.py versions/{chosen[1]}/v1.py --format agent"):
        assert words in text, words
    lines = [line for line in made.stdout.splitlines() if line.startswith("next: ")]
    assert len(lines) == 3 and lines[-1].endswith(
        "krung run vectoradd_py versions/vectoradd_py/v1.py --format agent")
    for line in (lines[0], lines[-1]):  # each first version passes the checks, as printed
        result = run_next(f"{line} --rungs static,compile,run,correctness", tmp_path, store)
        assert result.code == 0, result.stdout + result.stderr
        assert "delegated" in result.stdout


def test_problems_that_bring_different_helpers_of_one_name_leave_no_workspace(krung, tmp_path):
    for name, helper in (("a", "A = 1\n"), ("b", "B = 2\n")):
        shutil.copytree(GPUMODE / "vectoradd_py", tmp_path / name / "vectoradd_py")
        write(tmp_path / name / "utils.py", (GPUMODE / "utils.py").read_text() + helper)
    result = krung("init", "ws", "--from", tmp_path / "a" / "vectoradd_py",
                   "--from", tmp_path / "b" / "vectoradd_py")
    assert result.code == 2  # one name twice is refused before anything is copied
    assert "two problems would share the folder vectoradd_py" in result.stderr
    shutil.move(tmp_path / "b" / "vectoradd_py", tmp_path / "b" / "vectoradd2_py")
    result = krung("init", "ws", "--from", tmp_path / "a" / "vectoradd_py",
                   "--from", tmp_path / "b" / "vectoradd2_py")
    assert result.code == 2 and "two problems bring different files to utils.py" in result.stderr
    assert not (tmp_path / "ws").exists()
