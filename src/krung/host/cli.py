"""The `krung` command. It calls only the public API (krung/__init__.py).

Exit status (ExitCode): 0 every rung ok; 1 a rung failed; 2 bad usage or a broken problem;
3 krung itself failed (the judge process died). Errors print as `Type: message` and a hint.
"""

from __future__ import annotations

import contextlib
import enum
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

import krung
from krung.host import (
    cli_artifacts,
    cli_errors,
    cli_roofline,
    cli_scale,
    cli_service,
    cli_suite,
    cli_workspace,
    display,
    options,
    report,
)
from krung.host.next_step import Turn
from krung.host.options import FormatOption, JsonOption, OutputFormat, StoreOption
from krung.host.scaffold import scaffold


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    INTERNAL = 3
    INTERRUPTED = 130  # Ctrl-C or SIGTERM, as a shell reports SIGINT


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Develop GPU kernels in a verifiable loop: check, time and record every "
                       "version.")
# Wide when not a terminal, so tables piped to a file or read by an agent are never cut.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)



def _print_version(asked: bool) -> None:
    if asked:
        sys.stdout.write(f"krung {krung.__version__}\n")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print krung's version and exit.")] = False) -> None:
    """The options before the command (krung --version)."""


def _output_format(json_output: bool, chosen: OutputFormat | None) -> OutputFormat:
    if json_output and chosen not in (None, OutputFormat.JSON):
        raise krung.UsageError(f"--json and --format {chosen.value} ask for different outputs",
                               hint="give only one of them")
    return OutputFormat.JSON if json_output else (chosen or OutputFormat.TEXT)


def _settings(store: Path | None) -> krung.Settings:
    settings = krung.Settings.from_env()
    return settings.replace(store=store) if store else settings


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


@app.command()
@options.takes(*options.RUN)
def run(
    problem: Annotated[str, typer.Argument(
        help="Problem: a krung problem directory, a KernelBench .py file, a GPU MODE "
             "directory (reference.py + task.yml), or a built-in name.")],
    solution: Annotated[Path, typer.Argument(
        help="The version: a .py file defining kernel() (KernelBench: class ModelNew; "
             "GPU MODE: custom_kernel).")],
    **given: Any,
) -> None:
    """Evaluate one version of a problem through the ladder and record the run."""
    rungs = _with_profile(given["rungs"]) if given["profile"] else given["rungs"]
    settings = options.settings_of(given)
    chosen = _output_format(given["json_output"], given["output_format"])
    show = chosen is OutputFormat.TEXT
    # A bar on a terminal, else `[rung] case i/n ...` lines on stderr at most once a second.
    planned = krung.select_rungs(rungs)
    progress = display.run_progress(err, planned) if show else None

    def on_env(env: dict) -> None:
        if show and not getattr(on_env, "done", False):
            out.print(report.device_notice(env))
            on_env.done = True  # type: ignore[attr-defined]

    def on_progress(rung: str, message: str) -> None:
        if progress is not None:
            progress.update(rung, message)

    def on_result(result: krung.RungResult) -> None:
        """Each rung's line as it finishes (flushed), so a run stopped mid-way has shown
        every rung it finished; JSON stays one object at the end."""
        if progress is not None:
            progress.rung_done(result)
        if show:
            for line in report.rung_block(result):
                out.print(line, markup=False)
        elif chosen is OutputFormat.AGENT:
            sys.stdout.write(report.agent_rung_line(result) + "\n")
            sys.stdout.flush()

    try:
        with progress or contextlib.nullcontext():
            result = krung.evaluate(problem, solution, rungs=rungs, device=given["device"],
                                    seed=given["seed"], precision=given["precision"],
                                    settings=settings, on_result=on_result,
                                    on_progress=on_progress, on_env=on_env,
                                    parent=given["parent"])
    except krung.Interrupted as stopped:  # the run as recorded, saying where it stopped
        result = stopped.run
    if chosen is OutputFormat.JSON:
        _print_json(result.to_json())
    elif chosen is OutputFormat.AGENT:  # its `next:` command repeats this one's options
        turn = Turn(problem, str(solution), rungs, tuple(options.as_flags(given, options.REPEATED)),
                    str(given["store"]) if given["store"] else None)
        sys.stdout.write("\n" + report.agent_summary(result, turn=turn) + "\n")
    else:
        _print_tables_and_verdict(result)
    if result.interrupted:
        raise typer.Exit(ExitCode.INTERRUPTED)
    if result.error:
        raise typer.Exit(ExitCode.INTERNAL)
    raise typer.Exit(ExitCode.OK if result.ok else ExitCode.FAILED)


def _with_profile(rungs: str | None) -> str:
    """`--rungs` with the profile added: to the default ladder, or to the rungs named."""
    if not rungs or rungs.strip().startswith("+"):
        return f"{rungs},+profile" if rungs else "+profile"
    return f"{rungs},profile"


@app.command()
def problems(json_output: JsonOption = False) -> None:
    """List the built-in problems."""
    found = krung.builtin_problems()
    if json_output:
        _print_json([{"name": n, "description": d} for n, d in found])
        return
    for name, description in found:
        out.print(f"{name:<14} {description}", markup=False)


@app.command()
def new(
    name: Annotated[str, typer.Argument(help="Name of the new problem (a directory).")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to create it.")] = Path("."),
) -> None:
    """Scaffold a problem directory and a first Triton version."""
    target = scaffold(name, directory)
    out.print(f"created {target}/problem.py and {target}/solutions/triton_v1.py", markup=False)
    out.print(f"next: krung run {target} {target}/solutions/triton_v1.py", markup=False)


@app.command()
def history(
    problem: Annotated[str, typer.Argument(help="Problem name (its directory's name).")],
    limit: Annotated[int, typer.Option(help="Show at most this many runs.")] = 50,
    json_output: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Every recorded version of a problem, newest first: verdict, time, speedup, % of the
    roofline, its parent run and the change in time from it."""
    entries = krung.history(krung.history_name(problem), limit=limit, store=_settings(store).store)
    if json_output:
        _print_json([e.to_json() for e in entries])
        return
    if not entries:
        out.print(f"no runs of {problem} in this store", markup=False)
        return
    out.print(report.history_table(entries,
                                   f"{krung.history_name(problem)}: {len(entries)} run(s)"))


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="A run id, or a unique prefix of one.")],
    source: Annotated[bool, typer.Option(help="Include the version's source.")] = False,
    json_output: JsonOption = False,
    output_format: FormatOption = None,
    store: StoreOption = None,
) -> None:
    """One run: its rungs, figures and failures."""
    chosen = _output_format(json_output, output_format)
    found = _open(store).get(run_id)
    if chosen is OutputFormat.JSON:
        _print_json(found.to_json(with_source=source))
        return
    if chosen is OutputFormat.AGENT:
        sys.stdout.write(report.agent_report(found, Turn.of_run(found, str(store) if store
                                                                else None)) + "\n")
        return
    out.print(f"run {found.run_id}  {found.problem}  {found.solution}", markup=False)
    out.print(f"started {found.started_at}  seed {found.seed}  sha256 {found.source_sha256[:12]}"
              f"  parent {found.parent or '-'}", markup=False)
    out.print(report.device_notice(found.env), markup=False)
    for rung in found.rungs:
        for line in report.rung_block(rung):
            out.print(line, markup=False)
    _print_tables_and_verdict(found)
    if source:
        out.print()
        out.print(found.source, markup=False)


@app.command()
def best(
    problem: Annotated[str, typer.Argument(help="Problem name (its directory's name).")],
    by: Annotated[str, typer.Option(
        help=f"The rule: {', '.join(krung.BEST_RULES)} (time: the lowest geomean of the "
             "bench-case medians; roofline: the highest geomean % of the roofline).")] = "time",
    json_output: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """The fastest passing version: lowest geometric mean of the bench-case medians,
    among runs that passed every rung, compared only with runs on the same device."""
    found = krung.best_run(krung.history_name(problem), rule=by, store=_settings(store).store)
    if found is None:
        raise typer.Exit(cli_errors.report(
            "NoPassingRun", f"no passing, benchmarked run of {problem} in this store"
            + (" with roofline figures" if by == "roofline" else ""),
            f"krung history {problem} lists its runs", ExitCode.FAILED, json_output))
    entry, rule, among = found
    if json_output:
        _print_json({**entry.to_json(), "rule": rule})
        return
    out.print(f"rule: {rule}", markup=False)
    out.print(report.history_table([entry], f"best of {among} passing run(s)"))


@app.command()
def pin(
    problem: Annotated[str, typer.Argument(
        help="Problem: a directory, a KernelBench .py file, a GPU MODE directory, or a "
             "built-in name.")],
    replace: Annotated[bool, typer.Option(
        help="Replace a pin whose files differ (the change is yours, not the agent's).")
    ] = False,
    json_output: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Pin a problem's files (their hashes, in the store): a graded run (--graded, the MCP
    server) whose problem differs from its pin is refused. Pin before an agent starts."""
    pinned = krung.pin_problem(problem, store=_settings(store).store, replace=replace)
    if json_output:
        _print_json(pinned)
        return
    out.print(f"pinned {pinned['problem_path']} ({len(pinned['files'])} files, sha256 "
              f"{pinned['problem_sha256'][:12]}) at {pinned['pinned_at']}", markup=False)
    for name, sha in pinned["files"].items():
        out.print(f"  {sha[:12]}  {name}", markup=False)


# For coding agents: the MCP server and the run's JSON Schema.


@app.command("mcp")
def mcp_server(
    http: Annotated[int | None, typer.Option(
        "--http", metavar="PORT", help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp) "
                                       "instead of stdio.")] = None,
    ungraded: Annotated[bool, typer.Option(
        "--ungraded", help="Serve without graded mode: seeds and weakening settings taken, "
                           "every run of the store visible (graded is the default: "
                           "docs/agents.md).")] = False,
    store: StoreOption = None,
) -> None:
    """Serve krung's tools to coding agents over the Model Context Protocol (stdio)."""
    try:
        from krung.host.mcp import serve
    except ImportError as exc:
        raise krung.UsageError(f"the MCP server needs the mcp package, version 2 or newer "
                               f"({exc})", hint="pip install 'krung[mcp]'") from None
    serve(store=_settings(store).store, http_port=http, graded=not ungraded)


@app.command()
def schema() -> None:
    """Print the JSON Schema (draft 2020-12) of a run: what `krung run --json` prints."""
    _print_json(krung.run_schema())


def _print_tables_and_verdict(run: krung.Run) -> None:
    for rung in run.rungs:
        table = report.case_table(rung)
        if table is not None:
            out.print()
            out.print(table)
    out.print()
    out.print(report.verdict(run), markup=False)


def _open(store: Path | None) -> krung.Store:
    return krung.Store(_settings(store).store)


# Suites of problems in other formats, scored as KernelBench scores them (cli_suite.py).
app.command()(cli_suite.suite)

# What the compiler made of a run's kernels, and two runs compared (cli_artifacts.py).
app.command()(cli_artifacts.artifacts)
app.command()(cli_artifacts.diff)

# Working in a workspace: `krung init`, `krung watch`, `krung context ...` (cli_workspace.py).
app.command()(cli_workspace.init)
app.command()(cli_workspace.watch)
app.add_typer(cli_workspace.context_app, name="context")
# Many versions at once, on local GPUs, a Ray cluster or a remote host (cli_scale.py).
app.command()(cli_scale.batch)

# The device's ceilings and the HTML report: `krung calibrate`, `krung report` (cli_roofline.py).
app.command()(cli_roofline.calibrate)
app.command()(cli_roofline.report)
app.add_typer(cli_service.service_app, name="service")  # the warm service (cli_service.py)


def main(args: list[str] | None = None) -> None:
    """Run the command; whatever happens, one message and a documented exit status (and with
    --json, one JSON object on stdout): see cli_errors."""
    args = sys.argv[1:] if args is None else args
    wants_json = cli_errors.asks_for_json(args)
    try:
        # Not standalone: click returns the exit code, and raises what it would have printed.
        code = app(args=args, prog_name="krung", standalone_mode=False)
    except krung.KrungError as exc:
        code = cli_errors.report(type(exc).__name__, exc.message, exc.hint, ExitCode.USAGE,
                                 wants_json)
    except typer.Exit as exc:
        code = exc.exit_code
        if isinstance(exc.__cause__, KeyboardInterrupt):  # typer 0.29's way of a Ctrl-C
            code = _interrupted(wants_json)
    except (typer.Abort, KeyboardInterrupt):
        code = _interrupted(wants_json)
    except Exception as exc:
        if cli_errors.is_parser_error(exc):
            code = cli_errors.parser_error(exc, wants_json)
        else:
            code = cli_errors.internal_error(exc, wants_json)
    sys.exit(code if isinstance(code, int) else ExitCode.OK)


def _interrupted(wants_json: bool) -> int:
    return cli_errors.report("Interrupted", "stopped before the command finished", None,
                             ExitCode.INTERRUPTED, wants_json)


if __name__ == "__main__":
    main()
