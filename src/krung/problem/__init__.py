"""Problems: what must be computed, how to make inputs, and how much work that is.

`find_problem` turns what a user typed (a directory, a `problem.py`, or a built-in name) into
a path without importing anything; `load_problem` imports and validates it (in the judge).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krung.errors import UsageError

PROBLEM_FILE = "problem.py"


@dataclass
class Problem:
    name: str
    path: Path
    reference: Callable[..., Any]
    make_inputs: Callable[[dict, int, str], tuple]
    test_cases: list[dict]
    bench_cases: list[dict]
    flops: Callable[[dict], int]
    bytes_moved: Callable[[dict], int]
    cpu_bench_cases: list[dict] = field(default_factory=list)
    tolerance: Any = None
    description: str = ""
    format: str = "native"
    # Trust policy (see krung/contract.py): Python names the version must not use (`static`
    # rung), torch operators it must not run (traced at run time), and whether it may write
    # its inputs.
    forbid: list[str] = field(default_factory=list)
    forbid_ops: list[str] = field(default_factory=list)
    inplace: bool = False
    derive_case: Callable[..., dict | None] | None = None

    def bench_cases_for(self, device: str) -> list[dict]:
        """Bench cases sized for the device: the interpreter on a CPU needs small ones."""
        if device == "cpu":
            return self.cpu_bench_cases or [min(self.bench_cases, key=case_size)]
        return self.bench_cases


def case_label(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


def case_size(case: dict) -> int:
    """The product of a case's integer sizes: a rough measure of how much work it is."""
    size = 1
    for value in case.values():
        if isinstance(value, int) and not isinstance(value, bool):
            size *= max(value, 1)
    return size


def builtin_dir() -> Path:
    """Where the built-in problems are: in the installed package, or in the source tree."""
    here = Path(__file__).resolve().parent.parent
    packaged = here / "builtin_problems"
    return packaged if packaged.is_dir() else here.parent.parent / "problems"


def builtin_problems() -> list[tuple[str, str]]:
    """(name, description) of each built-in problem, read without importing anything."""
    root = builtin_dir()
    found = []
    for path in sorted(root.glob(f"*/{PROBLEM_FILE}")):
        found.append((path.parent.name, read_description(path)))
    return found


def read_description(problem_file: Path) -> str:
    """The problem's `description` (or its docstring), by parsing, not importing."""
    try:
        tree = ast.parse(problem_file.read_text(), filename=str(problem_file))
    except (OSError, SyntaxError):
        return ""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "description" for t in node.targets)):
            return str(node.value.value).strip()
    doc = (ast.get_docstring(tree) or "").strip()
    return doc.split("\n")[0]


def find_problem(spec: str | Path) -> Path:
    """The problem directory for a path or a built-in problem's name."""
    path = Path(spec)
    if path.is_file() and path.name == PROBLEM_FILE:
        return path.parent.resolve()
    if path.is_dir():
        if (path / PROBLEM_FILE).is_file():
            return path.resolve()
        raise UsageError(f"{path} has no {PROBLEM_FILE}",
                         hint=f"a problem directory holds {PROBLEM_FILE}; `krung new NAME` "
                              "scaffolds one")
    builtin = builtin_dir() / str(spec)
    if (builtin / PROBLEM_FILE).is_file():
        return builtin.resolve()
    names = ", ".join(name for name, _ in builtin_problems())
    raise UsageError(f"no problem at {spec!r}: not a directory and not a built-in problem",
                     hint=f"give a problem directory, or one of the built-in problems: {names}")


def load_problem(path: Path) -> Problem:
    """Import and validate a problem; raises ProblemError listing every defect."""
    from krung.problem.native import load_native

    return load_native(path)
