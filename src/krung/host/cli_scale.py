"""The `krung batch` command: many versions through one executor, with overall progress.

cli.py registers it; like every front end it calls only the public API (krung/__init__).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

import krung
from krung.host import options, report

FAILED = 1  # cli.ExitCode.FAILED

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def choose_executor(given: Mapping[str, Any]) -> krung.Executor:
    """The executor the command line names (`given`: the command's options), with the
    options that apply to it."""
    name, workers, gpus = given["executor"], given["workers"], given["gpus"]
    chosen: dict = {}
    if name == "local":
        chosen = {"workers": workers, "per_gpu": given["per_gpu"],
                  "gpus": "all" if gpus == "all" else (gpus.split(",") if gpus else None)}
    elif name == "ray":
        chosen = {"address": given["address"]}
    elif name == "ssh":
        chosen = {"remote": given["remote"] or "", "python": given["remote_python"],
                  "ssh_options": given["ssh_option"] or [], "workers": workers}
    return krung.make_executor(name, **chosen)


@options.takes(*options.BATCH)
def batch(
    problem: Annotated[str, typer.Argument(help="Problem directory, or a built-in name.")],
    versions: Annotated[list[Path], typer.Argument(help="The versions (.py files).")],
    **given: Any,
) -> None:
    """Evaluate many versions of one problem, on this machine's CPU or GPUs, a Ray cluster or
    a remote host; every run lands in the store."""
    settings = options.settings_of(given)
    chosen = choose_executor(given)
    json_output = given["json_output"]

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
    outcomes = krung.run_batch(problem, list(versions), chosen, settings, rungs=given["rungs"],
                               device=given["device"], on_outcome=on_outcome)
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
