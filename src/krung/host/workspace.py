"""`krung init DIR`: a kernel workspace for a person or a coding agent.

    DIR/NAME/problem.py      the problem (a built-in one, a copy of a directory, or the
                             template), in a folder named after it: runs record the
                             problem by that name (and its path)
    DIR/versions/v1.py       a first version in the chosen DSL
    DIR/AGENTS.md            the loop, the exact commands, how to read results, the rules
    DIR/CLAUDE.md            points Claude Code at AGENTS.md
    DIR/.mcp.json            krung's MCP server for Claude Code
    DIR/context/INDEX.md     what the context directory holds (empty at first)

Everything is written from the problem's source text: nothing is imported.
"""

from __future__ import annotations

import ast
import json
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from krung.host import templates
from krung.host.context import write_index
from krung.host.scaffold import template_problem
from krung.judge.ladder import RUNGS
from krung.judge.problem import (
    NATIVE,
    PROBLEM_FILE,
    builtin_dir,
    builtin_problems,
    detect_format,
    find_problem,
    read_description,
)
from krung.protocol.errors import UsageError

DSLS = tuple(templates.DSL_NAMES)
VERSIONS_DIR = "versions"
FIRST_VERSION = "v1.py"
# Left behind when a problem directory is copied: example versions would give the answer
# away, and caches and stores belong to where they were made.
_NOT_COPIED = ("solutions", "__pycache__", "*.pyc", ".krung", ".git")


@dataclass
class Workspace:
    path: Path
    problem: Path  # the problem directory inside the workspace
    first_version: Path
    dsl: str
    source: str  # where the problem came from, in words
    files: list[Path] = field(default_factory=list)


def init_workspace(directory: str | Path, *, problem: str | None = None,
                   from_path: str | Path | None = None, dsl: str = "triton") -> Workspace:
    """Create a workspace in `directory`, which must not exist or be empty."""
    if dsl not in DSLS:
        raise UsageError(f"unknown DSL {dsl!r}", hint=f"choose one of: {', '.join(DSLS)}")
    if problem is not None and from_path is not None:
        raise UsageError("--problem and --from both given",
                         hint="--problem NAME copies a built-in problem, --from PATH a problem "
                              "directory: give one, or neither for the template")
    target = Path(directory)
    _check_empty(target)
    source_dir = _source_problem(problem, from_path)

    if source_dir is None:
        name = target.resolve().name
        title = name if name.isidentifier() else "my_kernel"
        problem_dir = target / problem_folder(title)
        problem_dir.mkdir(parents=True)
        (problem_dir / PROBLEM_FILE).write_text(template_problem(title))
        source = "the template (SiLU; edit it into your operation)"
    else:
        title = source_dir.name
        problem_dir = target / problem_folder(title)
        target.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source_dir, problem_dir, ignore=shutil.ignore_patterns(*_NOT_COPIED))
        builtin = source_dir.parent == builtin_dir().resolve()
        source = f"built-in problem {title}" if builtin else f"copy of {source_dir}"

    problem_file = problem_dir / PROBLEM_FILE
    signature = reference_signature(problem_file)
    working = source_dir is None  # the template's SiLU is what the example kernels compute
    version = target / VERSIONS_DIR / FIRST_VERSION
    version.parent.mkdir(parents=True)
    version.write_text(_first_version(dsl, title, signature, working, problem_dir.name))

    description = read_description(problem_file) or f"compute what `reference` in {title} does"
    files = [problem_file, version]
    for name, text in (
        ("AGENTS.md", _agents_md(title, dsl, signature, description, working,
                                 problem_dir.name)),
        ("CLAUDE.md", templates.workspace_file("CLAUDE.md")),
        (".mcp.json", templates.mcp_json(krung_command())),
        (".gitignore", templates.workspace_file("gitignore")),
    ):
        (target / name).write_text(text)
        files.append(target / name)
    files.append(write_index(target))
    return Workspace(path=target, problem=problem_dir, first_version=version, dsl=dsl,
                     source=source, files=files)


def krung_command() -> list[str]:
    """How an agent's MCP client starts this krung: the Python it is installed under, with
    `-m krung`. A bare `krung` starts only where its bin directory is on PATH, which a venv's
    is not unless activated."""
    return [sys.executable, "-m", "krung"] if sys.executable else ["krung"]


def problem_folder(title: str) -> str:
    """The folder the workspace keeps its problem in: the problem's own name, so its runs
    are recorded under that name (every workspace's `problem` would read alike), unless the
    name is taken by the workspace's own files."""
    taken = {VERSIONS_DIR, "context", ".krung", "AGENTS.md", "CLAUDE.md", ".mcp.json",
             ".gitignore"}
    return f"{title}_problem" if title in taken else title


def reference_signature(problem_file: Path) -> str:
    """The parameters of the problem's `reference`, as source text, e.g. `x, weight`."""
    try:
        tree = ast.parse(problem_file.read_text(), filename=str(problem_file))
    except (OSError, SyntaxError):
        return "*inputs"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "reference":
            args = node.args
            names = [a.arg for a in [*args.posonlyargs, *args.args]]
            if args.vararg:
                names.append(f"*{args.vararg.arg}")
            return ", ".join(names) or "*inputs"
    return "*inputs"


def _check_empty(target: Path) -> None:
    if target.is_file():
        raise UsageError(f"{target} is a file, not a directory",
                         hint="give the path of a new (or empty) directory for the workspace")
    if target.is_dir():
        present = sorted(p.name for p in target.iterdir())
        if present:
            shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
            raise UsageError(f"{target} is not empty ({len(present)} entries: {shown}); "
                             "krung init never overwrites files",
                             hint=f"choose a new directory (krung init {target}-2), or empty "
                                  "this one first")


def _source_problem(problem: str | None, from_path: str | Path | None) -> Path | None:
    if from_path is not None:
        path = Path(from_path)
        if not path.exists():
            raise UsageError(f"no problem directory at {from_path}",
                             hint=f"give a directory holding {PROBLEM_FILE}, or use --problem "
                                  "NAME for a built-in problem")
        return _native(find_problem(path), from_path)
    if problem is not None:
        if Path(problem).exists():
            return _native(find_problem(problem), problem)
        names = [name for name, _ in builtin_problems()]
        if problem not in names:
            raise UsageError(f"no built-in problem named {problem!r}",
                             hint=f"choose one of: {', '.join(names)} (krung problems lists "
                                  "them), or --from PATH for a problem directory")
        return find_problem(problem)
    return None


def _native(found: Path, spec: str | Path) -> Path:
    """Workspaces hold problems in krung's own format; the others run where they are."""
    kind = detect_format(found)
    if kind != NATIVE:
        raise UsageError(f"{spec} is a {kind} problem; krung init copies problems in krung's "
                         "own format", hint=f"run it as it is: krung run {spec} VERSION.py")
    return found


def _first_version(dsl: str, title: str, signature: str, working: bool,
                   problem_dir: str) -> str:
    if working:
        entry = templates.WORKING_ENTRY
        where = ("on a GPU, or under the interpreter without one" if dsl == "triton"
                 else "on a GPU machine")
        state = ("\nThis first version is complete: its kernel computes the template's SiLU "
                 f"and passes every\nrung {where}. Make it faster in versions/v2.py.\n")
    else:
        entry = templates.fill(templates.SKELETON_ENTRY, signature=signature, problem=title)
        state = ("\nThis first version is a skeleton: `silu` is an example kernel showing how a "
                 "version in\nthis DSL is laid out; `kernel` is where yours goes, and it "
                 "raises NotImplementedError\nuntil then. Write your first kernel as "
                 "versions/v2.py, starting from this file.\n")
    return templates.fill(templates.version(dsl), title=title, signature=signature,
                          state=state, entry=entry,
                          checks=templates.fill(templates.workspace_file("checks.txt"), problem_dir=problem_dir))


def _agents_md(title: str, dsl: str, signature: str, description: str, working: bool,
               problem_dir: str) -> str:
    if working and dsl == "triton":
        v1_state = ("a working first version: it passes every rung. Run it first, then make it "
                    "faster.")
    elif working:
        v1_state = ("a complete first version whose kernel computes the template's SiLU; it "
                    "needs a GPU to run. Run it first, then make it faster.")
    else:
        v1_state = ("a skeleton: an example kernel that shows how a version in this DSL is laid "
                    "out, and a `kernel` that raises NotImplementedError. Write your first "
                    "kernel as `versions/v2.py`, starting from it.")
    task = (f"The task: {description.rstrip('.')}. A version is one Python file that defines "
            f"`kernel({signature})`: it takes the inputs `reference` takes and returns new "
            "tensor(s) with the count, dtype, shape and device of the reference's outputs, "
            f"computed by your own kernel in {templates.DSL_SHORT[dsl]}.")
    return templates.fill(
        templates.workspace_file("AGENTS.md"), title=title, problem_dir=problem_dir,
        dsl_name=templates.DSL_NAMES[dsl],
        dsl_short=templates.DSL_SHORT[dsl], context_hint=templates.CONTEXT_HINTS[dsl],
        v1_state=textwrap.fill(f"`versions/v1.py` is {v1_state}", width=96,
                               initial_indent="  ", subsequent_indent="  "),
        task=textwrap.fill(task, width=96), signature=signature,
        rungs=" -> ".join(RUNGS), mcp_command=json.dumps(krung_command()[0]),
        mcp_args=json.dumps([*krung_command()[1:], "mcp"]))
