"""`krung init DIR`: a kernel workspace for a person or a coding agent.

    DIR/NAME/problem.py      the problem (a built-in one, a copy of a directory, or the
                             template), in a folder named after it: runs record the
                             problem by that name (and its path); one folder per problem
    DIR/versions/v1.py       a first version in the chosen DSL (with several problems,
                             DIR/versions/NAME/v1.py for each)
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krung.host import templates
from krung.host.context import write_index
from krung.host.scaffold import template_problem
from krung.judge.ladder import RUNGS, select
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
    problem: Path  # the (first) problem directory inside the workspace
    first_version: Path  # the (first) problem's first version
    dsl: str
    source: str  # where the problems came from, in words
    files: list[Path] = field(default_factory=list)
    problems: list[Path] = field(default_factory=list)  # every problem directory
    first_versions: list[Path] = field(default_factory=list)  # each problem's first version


@dataclass
class _Problem:
    """One problem as the workspace holds it."""

    title: str
    folder: Path  # inside the workspace
    versions: str  # the folder of its versions, relative to the workspace
    source: str
    working: bool  # the template: its example kernels compute it

    @property
    def file(self) -> Path:
        return self.folder / PROBLEM_FILE


def init_workspace(directory: str | Path, *, problem: str | Sequence[str] | None = None,
                   from_path: str | Path | Sequence[str | Path] | None = None,
                   dsl: str = "triton") -> Workspace:
    """Create a workspace in `directory`, which must not exist or be empty: for the
    built-in problems named in `problem` and the problem directories in `from_path` (a
    directory of problem directories gives each), or the template when neither is given."""
    if dsl not in DSLS:
        raise UsageError(f"unknown DSL {dsl!r}", hint=f"choose one of: {', '.join(DSLS)}")
    target = Path(directory)
    sources = _source_problems(_listed(problem), _listed(from_path))
    _check_empty(target)
    problems = [_copy(target, source, len(sources) > 1) for source in sources] \
        if sources else [_template(target)]

    files: list[Path] = []
    versions = []
    for held in problems:
        version = target / held.versions / FIRST_VERSION
        version.parent.mkdir(parents=True)
        version.write_text(_first_version(dsl, held.title, reference_signature(held.file),
                                          held.working, held.folder.name, held.versions))
        files += [held.file, version]
        versions.append(version)
    for name, text in (
        ("AGENTS.md", _agents_md(problems, dsl)),
        ("CLAUDE.md", templates.workspace_file("CLAUDE.md")),
        (".mcp.json", templates.mcp_json(krung_command())),
        (".gitignore", templates.workspace_file("gitignore")),
    ):
        (target / name).write_text(text)
        files.append(target / name)
    files.append(write_index(target))
    return Workspace(path=target, problem=problems[0].folder, first_version=versions[0],
                     dsl=dsl, source="; ".join(p.source for p in problems), files=files,
                     problems=[p.folder for p in problems], first_versions=versions)


def _listed(given: Any) -> list[Any]:
    """None, one value, or several, as a list."""
    if given is None:
        return []
    return [given] if isinstance(given, (str, Path)) else list(given)


def _template(target: Path) -> _Problem:
    name = target.resolve().name
    title = name if name.isidentifier() else "my_kernel"
    folder = target / problem_folder(title)
    folder.mkdir(parents=True)
    (folder / PROBLEM_FILE).write_text(template_problem(title))
    return _Problem(title, folder, VERSIONS_DIR, "the template (SiLU; edit it into your "
                    "operation)", working=True)


def _copy(target: Path, source: Path, several: bool) -> _Problem:
    """The problem at `source` copied into the workspace; with several problems each keeps
    its versions in a folder of its own (versions/NAME)."""
    title = source.name
    folder = target / problem_folder(title)
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns(*_NOT_COPIED))
    builtin = source.parent == builtin_dir().resolve()
    return _Problem(title, folder, f"{VERSIONS_DIR}/{folder.name}" if several else VERSIONS_DIR,
                    f"built-in problem {title}" if builtin else f"copy of {source}",
                    working=False)


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


def _source_problems(problems: list[str], from_paths: list[str | Path]) -> list[Path]:
    """The problem directories to copy, each named once, in the order given."""
    found: list[Path] = []
    for from_path in from_paths:
        path = Path(from_path)
        if not path.exists():
            raise UsageError(f"no problem directory at {from_path}",
                             hint=f"give a directory holding {PROBLEM_FILE} (or directories "
                                  "that do), or use --problem NAME for a built-in problem")
        inside = sorted(p for p in path.iterdir() if (p / PROBLEM_FILE).is_file()) \
            if path.is_dir() and not (path / PROBLEM_FILE).exists() else []
        found += [_native(p, p) for p in inside] or [_native(find_problem(path), from_path)]
    for problem in problems:
        if Path(problem).exists():
            found.append(_native(find_problem(problem), problem))
            continue
        names = [name for name, _ in builtin_problems()]
        if problem not in names:
            raise UsageError(f"no built-in problem named {problem!r}",
                             hint=f"choose one of: {', '.join(names)} (krung problems lists "
                                  "them), or --from PATH for a problem directory")
        found.append(find_problem(problem))
    folders = [problem_folder(p.name) for p in found]
    twice = sorted({f for f in folders if folders.count(f) > 1})
    if twice:
        raise UsageError(f"two problems would share the folder {', '.join(twice)}",
                         hint="give each problem once; problems from two places with one name "
                              "go in two workspaces")
    return [p.resolve() for p in found]


def _native(found: Path, spec: str | Path) -> Path:
    """Workspaces hold problems in krung's own format; the others run where they are."""
    kind = detect_format(found)
    if kind != NATIVE:
        raise UsageError(f"{spec} is a {kind} problem; krung init copies problems in krung's "
                         "own format", hint=f"run it as it is: krung run {spec} VERSION.py")
    return found


def _first_version(dsl: str, title: str, signature: str, working: bool,
                   problem_dir: str, versions: str) -> str:
    if working:
        entry = templates.WORKING_ENTRY
        where = ("on a GPU, or under the interpreter without one" if dsl == "triton"
                 else "on a GPU machine")
        state = ("\nThis first version is complete: its kernel computes the template's SiLU "
                 f"and passes every\nrung {where}. Make it faster in {versions}/v2.py.\n")
    else:
        entry = templates.fill(templates.SKELETON_ENTRY, signature=signature, problem=title,
                               versions=versions)
        state = ("\nThis first version is a skeleton: `silu` is an example kernel showing how a "
                 "version in\nthis DSL is laid out; `kernel` is where yours goes, and it "
                 "raises NotImplementedError\nuntil then. Write your first kernel as "
                 f"{versions}/v2.py, starting from this file.\n")
    checks = templates.fill(templates.workspace_file("checks.txt"), problem_dir=problem_dir,
                            versions=versions)
    return templates.fill(templates.version(dsl), title=title, signature=signature,
                          state=state, entry=entry, checks=checks)


def _agents_md(problems: list[_Problem], dsl: str) -> str:
    """AGENTS.md: the loop's commands name the first problem; each problem's task, entry
    point and first version are listed."""
    first = problems[0]
    working = first.working
    if working and dsl == "triton":
        v1_state = ("a working first version: it passes every rung. Run it first, then make it "
                    "faster.")
    elif working:
        v1_state = ("a complete first version whose kernel computes the template's SiLU; it "
                    "needs a GPU to run. Run it first, then make it faster.")
    else:
        v1_state = ("a skeleton: an example kernel that shows how a version in this DSL is laid "
                    "out, and a `kernel` that raises NotImplementedError. Write your first "
                    "kernel as `v2.py` beside it, starting from it.")
    tasks = [_task(p, dsl, len(problems) > 1) for p in problems]
    several = len(problems) > 1
    return templates.fill(
        templates.workspace_file("AGENTS.md"),
        title=", ".join(p.title for p in problems), problem_dir=first.folder.name,
        how_many=f"{len(problems)} problems" if several else "one problem",
        versions=first.versions,
        versions_note=" (`versions/NAME/` for problem NAME)" if several else "",
        example_note=(f"the first problem, {first.folder.name}; for another, put its folder "
                      "and versions in their place" if several else "this workspace's problem"),
        problem_dirs=", ".join(f"`{p.folder.name}/`" for p in problems),
        problem_files=(f"`NAME/problem.py`, one folder per problem ({', '.join(p.folder.name for p in problems)})"
                       if several else f"`{first.folder.name}/problem.py`: the problem"),
        dsl_name=templates.DSL_NAMES[dsl],
        dsl_short=templates.DSL_SHORT[dsl], context_hint=templates.CONTEXT_HINTS[dsl],
        v1_state=textwrap.fill(f"Each problem's `v1.py` is {v1_state}" if several else
                               f"`{first.versions}/v1.py` is {v1_state}", width=96,
                               initial_indent="  ", subsequent_indent="  "),
        task="\n\n".join(tasks),
        rungs=" -> ".join(select(None)),
        on_request=", ".join(r for r in RUNGS if r not in select(None)),
        mcp_command=json.dumps(krung_command()[0]),
        mcp_args=json.dumps([*krung_command()[1:], "mcp"]))


def _task(problem: _Problem, dsl: str, several: bool) -> str:
    """What a version of `problem` computes and defines, and (with several) how to run it."""
    signature = reference_signature(problem.file)
    description = (read_description(problem.file)
                   or f"compute what `reference` in {problem.title} does")
    head = f"The task{f' of {problem.folder.name}' if several else ''}"
    text = textwrap.fill(
        f"{head}: {description.rstrip('.')}. A version is one Python file that defines "
        f"`kernel({signature})`: it takes the inputs `reference` takes and returns new "
        "tensor(s) with the count, dtype, shape and device of the reference's outputs, "
        f"computed by your own kernel in {templates.DSL_SHORT[dsl]}.", width=96)
    if several:
        text += (f"\n\n    krung run {problem.folder.name} {problem.versions}/v1.py "
                 "--format agent")
    return text
