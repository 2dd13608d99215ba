"""Which problems there are, and what each asks for, for a process that must not import
torch or a problem's code (the CLI, the MCP server).

Listing finds problems in every format by their files (`problem.py`; `reference.py` with
`task.yml`; a .py file defining KernelBench's Model, get_inputs and get_init_inputs) and
parses them; describing runs the problem in a child process (`python -m
krung.judge.problem.describe`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from krung.judge.problem import (
    GPUMODE,
    GPUMODE_FILES,
    KERNELBENCH,
    NATIVE,
    PROBLEM_FILE,
    builtin_dir,
    builtin_problems,
    find_problem,
    kernelbench_missing,
    problem_name,
    read_description,
)
from krung.protocol.errors import KrungError, ProblemError

DESCRIBE_TIMEOUT_S = 120.0

SEARCH_DEPTH = 3  # root/problem.py, root/x/problem.py, ... root/x/y/z/problem.py
MAX_FOLDERS = 5000  # a guard for a root such as a home directory
MAX_SCANNED_BYTES = 256_000  # larger .py files are not KernelBench problems worth parsing
_SKIP = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


def list_problems(root: str | Path | None = None) -> list[dict[str, Any]]:
    """The built-in problems, then the problems found under `root` (default: the current
    directory) in any format, each as {name, path, description, builtin, format}."""
    found = [{"name": name, "path": str(builtin_dir() / name), "description": description,
              "builtin": True, "format": NATIVE} for name, description in builtin_problems()]
    seen = {Path(p["path"]).resolve() for p in found}
    for path, kind in local_problems(Path(root) if root is not None else Path.cwd()):
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        found.append({"name": problem_name(path), "path": str(path),
                      "description": _description(path, kind), "builtin": False,
                      "format": kind})
    return found


def _description(path: Path, kind: str) -> str:
    if kind == NATIVE:
        return read_description(path / PROBLEM_FILE)
    if kind == KERNELBENCH:
        return read_description(path)
    try:
        import yaml

        task = yaml.safe_load((path / "task.yml").read_text())
        text = str(task.get("description") or "") if isinstance(task, dict) else ""
    except Exception:  # unreadable task.yml: the judge reports it when the problem runs
        text = ""
    return text.strip().split("\n")[0]


def local_problems(root: Path) -> list[tuple[Path, str]]:
    """(path, format) of the problems under `root`: directories holding problem.py or
    reference.py and task.yml, and KernelBench .py files; breadth first, hidden folders and
    virtual environments left out."""
    found: list[tuple[Path, str]] = []
    for folder in _folders(root):
        if (folder / PROBLEM_FILE).is_file():
            found.append((folder, NATIVE))
        elif all((folder / name).is_file() for name in GPUMODE_FILES):
            found.append((folder, GPUMODE))
        else:
            found += [(file, KERNELBENCH) for file in _kernelbench_files(folder)]
    return found


def _kernelbench_files(folder: Path) -> list[Path]:
    found = []
    for file in sorted(folder.glob("*.py")):
        try:
            if file.stat().st_size > MAX_SCANNED_BYTES:
                continue
            text = file.read_text(errors="replace")
        except OSError:
            continue
        if "get_init_inputs" in text and "class Model" in text and not kernelbench_missing(file):
            found.append(file)
    return found


def _folders(root: Path) -> list[Path]:
    """Folders under `root` to SEARCH_DEPTH, breadth first, hidden folders and virtual
    environments left out."""
    found: list[Path] = []
    level = [root]
    visited = 0
    for depth in range(SEARCH_DEPTH + 1):
        following: list[Path] = []
        for folder in level:
            visited += 1
            if visited > MAX_FOLDERS:
                return found
            found.append(folder)
            if depth == SEARCH_DEPTH:
                continue
            try:
                children = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            following += [Path(e.path) for e in children if e.is_dir(follow_symlinks=False)
                          and not e.name.startswith(".") and e.name not in _SKIP
                          and not (Path(e.path) / "pyvenv.cfg").exists()]
        level = following
    return found


def describe_problem(spec: str | Path, timeout: float = DESCRIBE_TIMEOUT_S) -> dict[str, Any]:
    """Describe a problem (a directory or a built-in name) from a child process.

    Raises UsageError for an unknown problem and ProblemError for a broken one.
    """
    path = find_problem(spec)
    try:
        done = subprocess.run([sys.executable, "-m", "krung.judge.problem.describe", str(path)],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise KrungError(f"describing {path} took more than {timeout:g} s",
                         hint="the problem's import, make_inputs or reference is slow on its "
                              "smallest test case: make that case small") from None
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise KrungError(f"describing {path} failed (exit status {done.returncode}):\n{tail}",
                         hint=f"run `python -c 'import runpy; runpy.run_path(\"{path}/"
                              f"{PROBLEM_FILE}\")'` to see the problem's own error") from None
    if "error" in answer:
        error = answer["error"]
        if error.get("defects"):
            raise ProblemError(str(path), [tuple(d) for d in error["defects"]])
        raise KrungError(error["message"], hint=error.get("hint"))
    return answer
