"""The README's example works as written: its problem and its version are written where it
names them, and every `krung` command it shows runs (on the CPU) and succeeds, in order."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO

BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
FILE_NAME = re.compile(r"`([\w./-]+\.py)`:\s*$")


def readme_parts() -> tuple[dict[str, str], list[list[str]]]:
    """The files the README shows (a python block right after a paragraph ending in
    `path.py`:) and the krung commands of its sh blocks, comments dropped."""
    text = (REPO / "README.md").read_text()
    files: dict[str, str] = {}
    commands: list[list[str]] = []
    for match in BLOCK.finditer(text):
        language, body = match.groups()
        before = text[:match.start()].rstrip().splitlines()[-1]
        named = FILE_NAME.search(before)
        if language == "python" and named:
            files[named.group(1)] = body
        elif language == "sh":
            for line in body.splitlines():
                words = shlex.split(line, comments=True)
                if words and words[0] == "krung":
                    commands.append(words[1:])
    return files, commands


def test_the_readme_shows_a_problem_a_version_and_the_loop():
    files, commands = readme_parts()
    assert set(files) == {"silu/problem.py", "silu_v1.py"}
    assert ["run", "silu", "silu_v1.py"] in commands and len(commands) >= 6


@pytest.mark.slow  # the README's whole walk-through: runs, report, service
def test_every_command_in_the_readme_runs(krung, tmp_path):
    files, commands = readme_parts()
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    try:
        for args in commands:
            result = krung(*args, timeout=900)
            assert result.code == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
            if args[:2] == ["run", "silu"]:
                assert "every rung" in result.stdout
    finally:
        krung("service", "stop")  # whatever failed, no service is left behind
    assert (tmp_path / "report.html").is_file()
    assert Path(tmp_path / "report.html").read_text().count('class="run"') >= 2
