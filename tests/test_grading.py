"""Graded mode (krung.host.grading): the problem's files against their pin, no chosen seed, no
setting that weakens a check; every run records how it was graded. The real `krung` command
in a subprocess; the MCP server's scoping is in test_mcp.py."""

from __future__ import annotations

import pytest

from krung.host import grading
from krung.judge.problem.files import combined_sha256, problem_files
from krung.protocol.errors import UsageError
from krung.protocol.settings import Settings, declared
from tests.conftest import GOOD, KERNELBENCH, write

CHECKED = "static,compile,run,correctness"


def verdict_line(krung, run_id: str) -> str:
    """The agent summary's first line (`OK (...)  run ...  device cpu`)."""
    shown = krung("show", run_id, "--format", "agent").stdout.splitlines()
    return next(line for line in shown if line.startswith("OK"))


def test_an_honest_graded_run_passes_and_says_so(krung, scale_problem, tmp_path):
    good = write(tmp_path / "good.py", GOOD)
    pinned = krung("pin", scale_problem, "--json")
    assert pinned.code == 0, pinned.stdout + pinned.stderr
    assert set(pinned.json()["files"]) == {"problem.py"}
    result = krung("run", scale_problem, good, "--graded", "--rungs", CHECKED, "--json")
    assert result.code == 0, result.stdout + result.stderr
    run = result.json()
    assert run["ok"] is True
    env = run["env"]
    assert env["graded"] is True and env["seed_secret"] is True
    assert env["problem_sha256"] == pinned.json()["problem_sha256"]
    assert env["problem_pinned_at"] == pinned.json()["pinned_at"]
    assert env["settings"] == {"KRUNG_DEVICE": "cpu", "KRUNG_GRADED": 1}
    assert "(not graded)" not in verdict_line(krung, run["run_id"])


def test_an_ungraded_run_records_its_seed_settings_and_problem(krung, scale_problem, tmp_path):
    good = write(tmp_path / "good.py", GOOD)
    result = krung("run", scale_problem, good, "--rungs", "static,compile,run", "--seed", "7",
                   "--json", env={"KRUNG_SEEDS": "1", "KRUNG_TIMED_INPUT_CHANGES": "off"})
    assert result.code == 0, result.stdout + result.stderr
    run = result.json()
    assert run["seed"] == 7
    env = run["env"]
    assert env["graded"] is False and env["seed_secret"] is False
    assert env["problem_sha256"] == combined_sha256(problem_files(scale_problem))
    assert env["settings"] == {"KRUNG_DEVICE": "cpu", "KRUNG_SEEDS": 1,
                               "KRUNG_TIMED_INPUT_CHANGES": "off"}
    assert verdict_line(krung, run["run_id"]).endswith("device cpu  (not graded)")


def test_a_graded_run_refuses_a_problem_unpinned_or_edited(krung, scale_problem, tmp_path,
                                                           store):
    good = write(tmp_path / "good.py", GOOD)
    graded = ("run", scale_problem, good, "--graded", "--rungs", CHECKED)
    unpinned = krung(*graded)
    assert unpinned.code == 2
    assert "is not pinned" in unpinned.stderr and f"krung pin {scale_problem}" in unpinned.stderr
    assert krung("pin", scale_problem).code == 0
    # The agent loosens the tolerance and adds a sidecar: both named, nothing recorded.
    problem = scale_problem / "problem.py"
    problem.write_text(problem.read_text() + "\ntolerance = {'float32': {'atol': 1.0}}\n")
    write(scale_problem / "krung.yml", "forbid: []\n")
    edited = krung(*graded)
    assert edited.code == 2, edited.stdout + edited.stderr
    assert "UsageError: the problem's files differ from those pinned" in edited.stderr
    assert "krung.yml (added), problem.py (changed)" in edited.stderr
    assert "hint: restore them" in edited.stderr
    assert krung("history", "scale", "--json").json() == []
    # A pin is not replaced by accident; the person who made the change can.
    again = krung("pin", scale_problem)
    assert again.code == 2 and "pinned already" in again.stderr and "--replace" in again.stderr
    assert krung("pin", scale_problem, "--replace").code == 0
    (scale_problem / "krung.yml").unlink()
    removed = krung(*graded)
    assert removed.code == 2 and "krung.yml (removed)" in removed.stderr


def test_a_graded_run_refuses_a_seed_weakening_settings_and_a_short_ladder(
        krung, scale_problem, tmp_path):
    good = write(tmp_path / "good.py", GOOD)
    assert krung("pin", scale_problem).code == 0
    seeded = krung("run", scale_problem, good, "--graded", "--seed", "7")
    assert seeded.code == 2 and "a graded run takes no seed (--seed" in seeded.stderr
    weak = krung("run", scale_problem, good, env={
        "KRUNG_GRADED": "1", "KRUNG_TIMED_INPUT_CHANGES": "cpu", "KRUNG_SEEDS": "1",
        "KRUNG_SANDBOX": "off", "KRUNG_KERNEL_CENSUS": "0"})
    assert weak.code == 2
    for named in ("KRUNG_SEEDS=1", "KRUNG_TIMED_INPUT_CHANGES=cpu", "KRUNG_SANDBOX=off",
                  "KRUNG_KERNEL_CENSUS=0"):
        assert named in weak.stderr
    assert "hint: unset them or set their defaults (KRUNG_SEEDS=3 " in weak.stderr
    short = krung("run", scale_problem, good, "--graded", "--rungs", "static,compile")
    assert short.code == 2 and "leaves out run, correctness" in short.stderr
    assert "--rungs static,compile,run,correctness" in short.stderr
    assert krung("history", "scale", "--json").json() == []


@pytest.mark.parametrize("rule", grading.WEAKENING, ids=lambda r: r.setting)
def test_every_weakening_setting_is_refused(rule):
    weakest = {"seeds": 1, "cpu_check_budget_s": 0.5, "timed_input_changes": "off",
               "sandbox": "off", "value_stress": "off", "kernel_census": False, "roofline_threshold_pct": 50.0,
               "extra_rungs": "my_rungs.toy"}[rule.setting]
    settings = Settings().replace(**{rule.setting: weakest})
    with pytest.raises(UsageError, match=declared(rule.setting).env):
        grading.refuse_bending(settings, grading.required_rungs(), None)
    grading.refuse_bending(Settings(sandbox="on", seeds=5), grading.required_rungs(), None)


def test_the_files_of_each_format_are_hashed(tmp_path):
    # KernelBench: the file and its sidecar, not the other problems beside it.
    folder = tmp_path / "kb"
    folder.mkdir()
    source = next(KERNELBENCH.glob("*.py"))
    problem = folder / source.name
    problem.write_bytes(source.read_bytes())
    write(folder / "other_problem.py", "x = 1\n")
    assert set(problem_files(problem)) == {source.name}
    write(folder / f"{problem.stem}.krung.yml", "forbid_ops: [mm]\n")
    assert set(problem_files(problem)) == {source.name, f"{problem.stem}.krung.yml"}
    # GPU MODE: the folder's files (not caches, hidden files or solutions) and what task.yml
    # brings from one level up.
    gm = tmp_path / "gm" / "vectoradd"
    write(gm / "reference.py", "x = 1\n")
    write(gm / "task.yml", "files:\n  - {name: utils.py, source: ../utils.py}\ntests: []\n")
    write(gm / "__pycache__" / "reference.cpython-311.pyc", "cache")
    write(gm / ".krung" / "krung.db", "store")
    write(gm / "solutions" / "v1.py", "version")
    write(tmp_path / "gm" / "utils.py", "def helper(): ...\n")
    files = problem_files(gm)
    assert set(files) == {"reference.py", "task.yml", "../utils.py"}
    before = combined_sha256(files)
    write(tmp_path / "gm" / "utils.py", "def helper(): return 1\n")
    assert combined_sha256(problem_files(gm)) != before


def test_krung_init_pins_the_workspaces_problem(krung, tmp_path):
    made = krung("init", "ws", "--problem", "vector_add")
    assert made.code == 0, made.stdout + made.stderr
    assert "pinned vector_add/ (1 files) for graded runs" in made.stdout
    problem = tmp_path / "ws" / "vector_add" / "problem.py"
    problem.write_text(problem.read_text().replace("test_cases", "test_cases_all", 1))
    graded = krung("run", "vector_add", "versions/v1.py", "--graded", cwd=tmp_path / "ws")
    assert graded.code == 2 and "problem.py (changed)" in graded.stderr
