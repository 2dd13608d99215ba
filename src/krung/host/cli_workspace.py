"""The `krung init`, `krung watch` and `krung context ...` commands: working in a workspace.

cli.py registers them; like every front end they call only the public API (krung/__init__).
Errors are raised as krung errors, which cli.main prints as `Type: message` and a hint.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

import krung
from krung.host import display, options

NEXT_LINES = 5  # a workspace of more problems (a KernelBench level) is summed up
FAILED = 1  # cli.ExitCode.FAILED: a rung failed, or (as grep) a search found nothing

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)

WorkspaceOption = Annotated[Path, typer.Option(
    "--dir", help="The workspace (the directory holding context/).")]


def init(
    directory: Annotated[Path, typer.Argument(help="The new workspace: a directory that does "
                                                   "not exist yet, or is empty.")],
    problem: Annotated[list[str] | None, typer.Option(
        "--problem", help="Copy this built-in problem (krung problems lists them); "
                          "repeat it for several.")] = None,
    from_path: Annotated[list[Path] | None, typer.Option(
        "--from", help="Copy the problem directory at this path, or each problem directory "
                       "in it; repeat it for several.")] = None,
    dsl: Annotated[str, typer.Option(
        help="DSL of the first version: triton, cuda, cutedsl or tilelang.")] = "triton",
) -> None:
    """Create a kernel workspace: the problems, a first version of each, AGENTS.md, MCP
    config, context/."""
    made = krung.init_workspace(directory, problem=problem, from_path=from_path, dsl=dsl)
    many = len(made.problems) > NEXT_LINES
    source = f"{len(made.problems)} problems" if many else made.source
    out.print(f"created workspace {made.path} ({made.dsl}; {source})", markup=False)
    # the problems' files and first versions come first, the workspace's own after them
    own = made.files[made.files.index(made.first_versions[-1]) + 1:]
    for path in own if many else made.files:
        out.print(f"  {path.relative_to(made.path)}", markup=False)
    if many:
        out.print(f"  and each problem with its versions/NAME/v1.py ({len(made.files) - len(own)}"
                  " files)", markup=False)
    # Pinned as krung copied them, before any agent can edit them: graded runs check them.
    store = krung.Settings.from_env().store
    files = 0
    for problem in made.problems:
        pinned = krung.pin_problem(problem, store=store if store.is_absolute()
                                   else made.path / store)
        files += len(pinned["files"])
    shown = made.problems[0].name + ("/" if made.problems[0].is_dir() else "") \
        if len(made.problems) == 1 else f"{len(made.problems)} problems"
    out.print(f"pinned {shown} ({files} files) for graded runs (krung run --graded, krung "
              "mcp)", markup=False)
    listed = list(zip(made.problems, made.first_versions, strict=True))
    for problem, version in listed[:NEXT_LINES]:
        command = shlex.join(["krung", "run", problem.name,
                              str(version.relative_to(made.path)), "--format", "agent"])
        out.print(f"next: cd {shlex.quote(str(made.path))} && {command}", markup=False)
    more = f"; it has the command for the other {len(listed) - NEXT_LINES} problems" \
        if len(listed) > NEXT_LINES else ""
    out.print(f"      (AGENTS.md is the guide, for agents and people alike{more})",
              markup=False)


@options.takes(*options.WATCH)
def watch(
    problem: Annotated[str, typer.Argument(help="Problem directory, or a built-in name.")],
    solution: Annotated[Path, typer.Argument(help="The version file to watch.")],
    **given: Any,
) -> None:
    """Evaluate a version, then again every time its file is saved (Ctrl-C stops)."""
    settings = options.settings_of(given)
    max_runs = given["max_runs"]
    if max_runs is not None and max_runs < 1:
        raise krung.UsageError(f"--max-runs {max_runs} runs nothing",
                               hint="use --max-runs 1 or more, or leave it out")
    last = None
    with display.watch_display(out, err) as screen:
        try:
            last = krung.watch(problem, solution, screen, max_runs=max_runs,
                               rungs=given["rungs"], device=given["device"], settings=settings)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a watch ends: end it cleanly, with status 0
        else:
            raise typer.Exit(0 if last is not None and last.ok else FAILED)
    err.print("stopped watching", markup=False)


context_app = typer.Typer(no_args_is_help=True, help="Reference material for the agent: "
                          "add, list and search the workspace's context/ directory.")


@context_app.command("add")
def context_add(
    name: Annotated[str | None, typer.Argument(
        help="Entry name (a folder under context/); defaults to the package with --package.")]
        = None,
    source: Annotated[str | None, typer.Argument(
        help="A git URL (cloned shallow) or a local file or directory.")] = None,
    package: Annotated[str | None, typer.Option(
        "--package", help="Copy an installed package's source files instead (e.g. triton, "
                          "cutlass, tilelang).")] = None,
    replace: Annotated[bool, typer.Option(help="Replace an entry of the same name.")] = False,
    workspace: WorkspaceOption = Path("."),
) -> None:
    """Add reference material to context/NAME, then rewrite context/INDEX.md."""
    if package is not None:
        if source is not None:
            raise krung.UsageError("give a SOURCE or --package, not both",
                                   hint="krung context add --package triton")
        entry = krung.add_package_context(workspace, package, name=name, replace=replace)
    else:
        if name is None or source is None:
            raise krung.UsageError("context add needs NAME and SOURCE, or --package",
                                   hint="krung context add cutlass https://github.com/NVIDIA/"
                                        "cutlass, or krung context add --package triton")
        entry = krung.add_context(workspace, name, source, replace=replace)
    skipped = f"; left out {entry.skipped} (binary, too big or not source)" \
        if entry.skipped else ""
    out.print(f"added context/{entry.name}: {entry.files} files, {_size(entry.bytes)} from "
              f"{entry.source}{skipped}", markup=False)
    out.print(f"indexed in {Path(workspace) / 'context' / 'INDEX.md'}", markup=False)


@context_app.command("list")
def context_list(
    workspace: WorkspaceOption = Path("."),
    json_output: options.JsonOption = False,
) -> None:
    """What context/ holds: each entry with its source, files and bytes."""
    entries = krung.list_context(workspace)
    if json_output:
        sys.stdout.write(json.dumps([e.to_json() for e in entries], indent=2) + "\n")
        return
    if not entries:
        out.print(f"context/ in {workspace} is empty; add with: krung context add --package "
                  "triton", markup=False)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("entry", "files", "bytes", "source"):
        table.add_column(column, justify="right" if column in ("files", "bytes") else "left")
    for e in entries:
        table.add_row(e.name, str(e.files), str(e.bytes), e.source)
    out.print(table)
    total = sum(e.bytes for e in entries)
    out.print(f"{len(entries)} entries, {sum(e.files for e in entries)} files, {total} bytes "
              f"({_size(total)})", markup=False)


@context_app.command("search")
def context_search(
    query: Annotated[str, typer.Argument(help="Text to find (literal; case-insensitive when "
                                              "it has no capital letter).")],
    max_hits: Annotated[int, typer.Option("--max", help="Stop after this many hits.")] = 50,
    regex: Annotated[bool, typer.Option(help="Treat QUERY as a regular expression.")] = False,
    workspace: WorkspaceOption = Path("."),
    json_output: options.JsonOption = False,
) -> None:
    """Search context/: one `file:line: text` line per hit, in path order."""
    hits = krung.search_context(workspace, query, max_hits=max_hits, regex=regex)
    if json_output:
        sys.stdout.write(json.dumps([{"path": h.path, "line": h.line, "text": h.text}
                                     for h in hits], indent=2) + "\n")
    else:
        for hit in hits:
            out.print(str(hit), markup=False)
        if len(hits) >= max_hits:
            err.print(f"(stopped at --max {max_hits} hits)", markup=False)
    if not hits:
        err.print(f"no match for {query!r} in context/", markup=False)
        raise typer.Exit(FAILED)


def _size(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""
