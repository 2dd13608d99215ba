"""`krung init DIR`: a kernel workspace for a person or a coding agent.

    DIR/NAME/problem.py      the problem (a built-in one, a copy of a directory, or the
                             template), in a folder named after it: runs record the
                             problem by that name (and its path); one folder per problem
                             (GPU MODE's too; a KernelBench problem is a file, DIR/NAME.py)
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
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krung.host import templates
from krung.host import workspace_formats as formats
from krung.host.context import write_index
from krung.host.scaffold import template_problem
from krung.judge.ladder import RUNGS, select
from krung.judge.problem import (
    GPUMODE,
    GPUMODE_FILES,
    KERNELBENCH,
    NATIVE,
    PROBLEM_FILE,
    builtin_dir,
    builtin_problems,
    detect_format,
    find_problem,
    kernelbench_missing,
    read_description,
)
from krung.judge.problem.policy import sidecar_path
from krung.protocol.errors import UsageError

DSLS = tuple(templates.DSL_NAMES)
VERSIONS_DIR = "versions"
FIRST_VERSION = "v1.py"
# Left behind when a problem directory is copied: example versions would give the answer
# away, and caches and stores belong to where they were made.
_NOT_COPIED = ("solutions", "__pycache__", "*.pyc", ".krung", ".git")
_NOT_COPIED_GPUMODE = (*_NOT_COPIED, "submission.py")  # GPU MODE's example answer


@dataclass
class Workspace:
    path: Path
    problem: Path  # the (first) problem inside the workspace: its folder, or KernelBench's file
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
    path: Path  # inside the workspace: its folder, or KernelBench's file
    versions: str  # the folder of its versions, relative to the workspace
    source: str
    working: bool  # the template: its example kernels compute it
    kind: str = NATIVE
    brought: list[Path] = field(default_factory=list)  # files it needs from beside it

    @property
    def file(self) -> Path:
        """The file that defines the reference."""
        if self.kind == NATIVE:
            return self.path / PROBLEM_FILE
        return formats.reference_file(self.path, self.kind)


def init_workspace(directory: str | Path, *, problem: str | Sequence[str] | None = None,
                   from_path: str | Path | Sequence[str | Path] | None = None,
                   dsl: str = "triton") -> Workspace:
    """Create a workspace in `directory`, which must not exist or be empty: for the
    built-in problems named in `problem` and the problems at `from_path` (krung's or GPU
    MODE's problem directories, KernelBench files, or a directory of them gives each), or
    the template when neither is given."""
    if dsl not in DSLS:
        raise UsageError(f"unknown DSL {dsl!r}", hint=f"choose one of: {', '.join(DSLS)}")
    target = Path(directory)
    sources = _source_problems(_listed(problem), _listed(from_path))
    _check_empty(target)
    existed = target.exists()
    try:
        problems = [_copy(target, source, len(sources) > 1) for source in sources] \
            if sources else [_template(target)]
    except UsageError:  # no half-made workspace left behind (the directory was empty)
        if existed:
            for made in target.iterdir():
                shutil.rmtree(made) if made.is_dir() else made.unlink()
        else:
            shutil.rmtree(target)
        raise

    files: list[Path] = []
    versions = []
    for held in problems:
        version = target / held.versions / FIRST_VERSION
        version.parent.mkdir(parents=True)
        version.write_text(
            _first_version(dsl, held.title, reference_signature(held.file), held.working,
                           held.path.name, held.versions) if held.kind == NATIVE
            else formats.first_version(held.kind, held.file, held.title, held.versions))
        files += [held.file, *held.brought, version]
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
    return Workspace(path=target, problem=problems[0].path, first_version=versions[0],
                     dsl=dsl, source="; ".join(p.source for p in problems), files=files,
                     problems=[p.path for p in problems], first_versions=versions)


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
    its versions in a folder of its own (versions/NAME). A GPU MODE problem's files from
    beside its folder (`../utils.py`) go to the same place beside it."""
    kind = detect_format(source)
    title = source.stem if kind == KERNELBENCH else source.name
    name = problem_folder(title)
    target.mkdir(parents=True, exist_ok=True)
    brought = []
    if kind == KERNELBENCH:
        path = target / f"{name}.py"
        shutil.copyfile(source, path)
        if sidecar_path(source).is_file():  # its policy, beside it
            shutil.copyfile(sidecar_path(source), sidecar_path(path))
            brought.append(sidecar_path(path))
    else:
        path = target / name
        shutil.copytree(source, path, ignore=shutil.ignore_patterns(
            *(_NOT_COPIED_GPUMODE if kind == GPUMODE else _NOT_COPIED)))
    for file, relative in formats.support_files(source, kind):
        placed = target / relative
        if placed.exists() and placed.read_bytes() != file.read_bytes():
            raise UsageError(f"two problems bring different files to {relative}",
                             hint="put problems that share helper files of one name but not "
                                  "their contents in two workspaces")
        placed.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, placed)
        brought.append(placed)
    builtin = source.parent == builtin_dir().resolve()
    return _Problem(title, path, f"{VERSIONS_DIR}/{name}" if several else VERSIONS_DIR,
                    f"built-in problem {title}" if builtin else f"copy of {source}",
                    working=False, kind=kind, brought=brought)


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
        inside = _problems_in(path) if path.is_dir() and not _is_problem_dir(path) else []
        found += inside or [find_problem(path)]
    for problem in problems:
        if Path(problem).exists():
            found.append(find_problem(problem))
            continue
        names = [name for name, _ in builtin_problems()]
        if problem not in names:
            raise UsageError(f"no built-in problem named {problem!r}",
                             hint=f"choose one of: {', '.join(names)} (krung problems lists "
                                  "them), or --from PATH for a problem directory")
        found.append(find_problem(problem))
    folders = [problem_folder(p.stem if p.is_file() else p.name) for p in found]
    twice = sorted({f for f in folders if folders.count(f) > 1})
    if twice:
        raise UsageError(f"two problems would share the folder {', '.join(twice)}",
                         hint="give each problem once; problems from two places with one name "
                              "go in two workspaces")
    return [p.resolve() for p in found]


def _is_problem_dir(path: Path) -> bool:
    return (path / PROBLEM_FILE).is_file() or all((path / n).is_file() for n in GPUMODE_FILES)


def _problems_in(folder: Path) -> list[Path]:
    """The problems one level down: problem directories (krung's, GPU MODE's) and KernelBench
    files."""
    return [p for p in sorted(folder.iterdir(), key=_numbered)
            if (p.is_dir() and _is_problem_dir(p))
            or (p.is_file() and p.suffix == ".py" and not kernelbench_missing(p))]


def _numbered(path: Path) -> list[Any]:
    """Sorts 2_ReLU before 10_GELU (KernelBench numbers its problems)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", path.name)]


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
    elif first.kind != NATIVE:
        v1_state = ("the reference itself in a version's shape: it passes every check but "
                    "computes with torch (`delegated`). Write your first kernel as `v2.py` "
                    "beside it, starting from it.")
    else:
        v1_state = ("a skeleton: an example kernel that shows how a version in this DSL is laid "
                    "out, and a `kernel` that raises NotImplementedError. Write your first "
                    "kernel as `v2.py` beside it, starting from it.")
    tasks = [_task(p, dsl, len(problems) > 1) for p in problems]
    several = len(problems) > 1
    return templates.fill(
        templates.workspace_file("AGENTS.md"),
        title=", ".join(p.title for p in problems), problem_dir=first.path.name,
        problem_file=str(first.file.relative_to(first.path.parent)),
        how_many=f"{len(problems)} problems" if several else "one problem",
        versions=first.versions,
        versions_note=" (`versions/NAME/` for problem NAME)" if several else "",
        example_note=(f"the first problem, {first.path.name}; for another, put its path "
                      "and versions in their place" if several else "this workspace's problem"),
        problem_dirs=", ".join(f"`{_shown(p)}`" for p in problems),
        what_is_here="\n".join(_what_is_here(problems)),
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


def _shown(problem: _Problem) -> str:
    return problem.path.name + ("" if problem.kind == KERNELBENCH else "/")


def _what_is_here(problems: list[_Problem]) -> list[str]:
    """AGENTS.md's bullets on the problems' files, one per format present."""
    bullets = []
    for kind in dict.fromkeys(p.kind for p in problems):
        of_kind = [p for p in problems if p.kind == kind]
        shown = ", ".join(f"`{_shown(p)}`" for p in of_kind)
        if kind != NATIVE:
            bullets.append(formats.what_is_here(kind, shown))
            continue
        names = (f"`NAME/problem.py`, one folder per problem ({shown})" if len(problems) > 1
                 else f"`{of_kind[0].path.name}/problem.py`: the problem")
        bullets.append(
            f"- {names}: `reference(...)` is the slow, clear definition\n"
            "  your kernel must match; `make_inputs(case, seed, device)` makes random inputs; "
            "`test_cases`\n  are the sizes checked for correctness (awkward ones on purpose), "
            "`bench_cases` the sizes\n  timed; `flops(case)` and `bytes_moved(case)` are the "
            "minimum work, for the roofline. Read\n  it first.")
    return bullets


def _task(problem: _Problem, dsl: str, several: bool) -> str:
    """What a version of `problem` computes and defines, and (with several) how to run it."""
    head = f"The task{f' of {problem.path.name}' if several else ''}"
    if problem.kind == NATIVE:
        signature = reference_signature(problem.file)
        description = (read_description(problem.file)
                       or f"compute what `reference` in {problem.title} does")
        defines = (f"`kernel({signature})`: it takes the inputs `reference` takes and returns "
                   "new tensor(s) with the count, dtype, shape and device of the reference's "
                   "outputs")
    else:
        reference = "Model" if problem.kind == KERNELBENCH else "ref_kernel"
        description = (read_description(problem.file)
                       or f"compute what `{reference}` in {problem.title} does")
        defines = formats.entry(problem.kind)
    text = textwrap.fill(
        f"{head}: {description.rstrip('.')}. A version is one Python file that defines "
        f"{defines}, computed by your own kernel in {templates.DSL_SHORT[dsl]}.", width=96)
    if several:
        text += (f"\n\n    krung run {problem.path.name} {problem.versions}/v1.py "
                 "--format agent")
    return text
