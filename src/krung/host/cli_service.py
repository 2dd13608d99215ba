"""`krung service start|stop|status`: the warm evaluation service of a store (service.py).

cli.py registers it. `krung run` and the other commands use a service that runs for their
store; KRUNG_SERVICE=on starts one on first use, off never uses one.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

import krung
from krung.host import service
from krung.host.options import JsonOption, StoreOption

FAILED = 1  # cli.ExitCode.FAILED

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
service_app = typer.Typer(no_args_is_help=True, help="The warm evaluation service of a store: "
                                                     "pre-started judges, so a version's "
                                                     "verdict comes in seconds.")



def _store(store: Path | None) -> Path:
    return store or krung.Settings.from_env().store


@service_app.command()
def start(
    pool: Annotated[int, typer.Option(help="Judges kept for each kind of evaluation (device, "
                                           "settings, environment), those at work counted: "
                                           "one replaces another when its evaluation "
                                           "ends.")] = service.POOL,
    idle: Annotated[float, typer.Option(help="Seconds without an evaluation after which the "
                                             "service exits.")] = service.IDLE_S,
    json_output: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Start the service for the store (if none runs) and leave it running until idle."""
    found = service.start(_store(store), pool=max(1, pool), idle_s=idle)
    _show(found, json_output)


@service_app.command()
def stop(json_output: JsonOption = False, store: StoreOption = None) -> None:
    """Stop the store's service; evaluations it handed out finish."""
    stopped = service.stop(_store(store))
    if json_output:
        sys.stdout.write(json.dumps({"stopped": stopped}) + "\n")
    else:
        out.print("stopped" if stopped else f"no service runs for {_store(store)}", markup=False)


@service_app.command()
def status(json_output: JsonOption = False, store: StoreOption = None) -> None:
    """Whether a service runs for the store (exit status 1 if not), and its judges."""
    found = service.status(_store(store))
    if found is None:
        if json_output:
            sys.stdout.write(json.dumps({"running": False}) + "\n")
        else:
            out.print(f"no service runs for {_store(store)}", markup=False)
        raise typer.Exit(FAILED)
    _show(found, json_output)


def _show(found: dict[str, Any], json_output: bool) -> None:
    if json_output:
        sys.stdout.write(json.dumps({"running": True, **found}) + "\n")
        return
    up = time.time() - float(found["started_at"])
    out.print(f"service {found['pid']} for {found['store']}: up {up:.0f} s, "
              f"{found['served']} evaluation(s) served, {found['running']} running, exits "
              f"after {found['idle_left_s']} s more without one", markup=False)
    for pool in found["pools"]:
        line = f"  {pool['device']}: {pool['ready']} ready, {pool['starting']} starting"
        out.print(line + (f"; broken: {pool['broken']}" if pool["broken"] else ""),
                  markup=False)
    if not found["pools"]:
        out.print("  no judges yet: the first evaluation starts a pool for its kind",
                  markup=False)
