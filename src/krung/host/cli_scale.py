"""The `krung batch` command: many versions through one executor, with overall progress.

cli.py registers it; like every front end it calls only the public API (krung/__init__).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

import krung
from krung.host import report

FAILED = 1  # cli.ExitCode.FAILED

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


# The executor's options, shared by `krung batch` and `krung suite`.
ExecutorName = Annotated[str, typer.Option("--executor", help="local, ray or ssh.")]
Workers = Annotated[int, typer.Option(help="Evaluations at once (local without --gpus, ssh).")]
Gpus = Annotated[str | None, typer.Option(help="GPUs for the local executor, e.g. 0,1 or all; "
                                               "one evaluation per GPU.")]
PerGpu = Annotated[int, typer.Option(help="Evaluations per GPU at once (their benchmarks "
                                          "take turns on the GPU).")]
Address = Annotated[str | None, typer.Option(help="Ray cluster address (ray executor).")]
Remote = Annotated[str | None, typer.Option(help="user@host (ssh executor).")]
RemotePython = Annotated[str, typer.Option(help="Python on the remote host.")]
SshOption = Annotated[list[str] | None, typer.Option(
    help="An option for ssh, e.g. -p2222 (repeatable).")]


def choose_executor(executor: str, workers: int = 1, gpus: str | None = None, per_gpu: int = 1,
                    address: str | None = None, remote: str | None = None,
                    remote_python: str = "python3",
                    ssh_option: list[str] | None = None) -> krung.Executor:
    """The executor the command line names, with the options that apply to it."""
    options: dict = {}
    if executor == "local":
        options = {"workers": workers, "per_gpu": per_gpu,
                   "gpus": "all" if gpus == "all" else (gpus.split(",") if gpus else None)}
    elif executor == "ray":
        options = {"address": address}
    elif executor == "ssh":
        options = {"remote": remote or "", "python": remote_python,
                   "ssh_options": ssh_option or [], "workers": workers}
    return krung.make_executor(executor, **options)


def batch(
    problem: Annotated[str, typer.Argument(help="Problem directory, or a built-in name.")],
    versions: Annotated[list[Path], typer.Argument(help="The versions (.py files).")],
    rungs: Annotated[str | None, typer.Option(help="Comma-separated rungs to climb.")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda.")] = None,
    executor: ExecutorName = "local",
    workers: Workers = 1,
    gpus: Gpus = None,
    per_gpu: PerGpu = 1,
    address: Address = None,
    remote: Remote = None,
    remote_python: RemotePython = "python3",
    ssh_option: SshOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    store: Annotated[Path | None, typer.Option("--store", help="SQLite store.")] = None,
) -> None:
    """Evaluate many versions of one problem, on this machine's CPU or GPUs, a Ray cluster or
    a remote host; every run lands in the store."""
    settings = krung.Settings.from_env()
    if store:
        settings = settings.replace(store=store)
    chosen = choose_executor(executor, workers, gpus, per_gpu, address, remote, remote_python,
                             ssh_option)

    def on_outcome(outcome: krung.Outcome, done: int, total: int) -> None:
        if json_output:
            return
        name = Path(outcome.job.solution).name
        if outcome.run is None:
            line = f"[{done}/{total}] {name}  ERROR  {outcome.error}"
        else:
            line = f"[{done}/{total}] {name}  {report.verdict(outcome.run)}"
        out.print(line, markup=False)

    if not json_output:
        out.print(f"batch: {len(versions)} version(s) of {problem}, {chosen.name} executor, "
                  f"{chosen.slots} at once", markup=False)
    outcomes = krung.run_batch(problem, list(versions), chosen, settings, rungs=rungs,
                               device=device, on_outcome=on_outcome)
    runs = [o.run for o in outcomes if o.run is not None]
    passed = sum(r.ok for r in runs)
    if json_output:
        sys.stdout.write(json.dumps({
            "passed": passed, "total": len(outcomes),
            "outcomes": [{"solution": o.job.solution, "error": o.error, "hint": o.hint,
                          "run": o.run.to_json() if o.run else None} for o in outcomes],
        }, indent=2) + "\n")
    else:
        if runs:
            from krung.host.history_tree import entries_for, lookup_in
            from krung.host.store import opened

            with opened(settings.store) as db:  # the runs' parents, for the change from them
                entries = entries_for(runs, lookup_in(db))
            out.print()
            out.print(report.history_table(entries, f"{passed}/{len(outcomes)} passed"))
    if passed < len(outcomes):
        raise typer.Exit(FAILED)
