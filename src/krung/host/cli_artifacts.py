"""The `krung artifacts` and `krung diff` commands: what the compiler made of a run's
kernels, and two runs compared (source, figures, SASS/PTX).

cli.py registers them; like every front end they call only the public API (krung/__init__).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

import krung
from krung.host.options import JsonOption, StoreOption
from krung.protocol.results import format_value

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)

KernelOption = Annotated[str | None, typer.Option(
    "--kernel", help="Only kernels (files) whose name contains this.")]
ARTIFACT_COLUMNS = ("registers", "static_smem_bytes", "dynamic_smem_bytes", "spills",
                    "threads_per_block", "occupancy", "limited_by", "highlights")


def artifacts(
    run_id: Annotated[str, typer.Argument(help="A run id, or a unique prefix of one.")],
    kind: Annotated[str | None, typer.Option(
        "--kind", help=f"Print the one file of this kind: {', '.join(krung.FILE_KINDS)}.")
    ] = None,
    kernel: KernelOption = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="Print this file (its path in the run's folder).")] = None,
    json_output: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """A run's kernels: their figures and files, or with --kind/--name one file's text."""
    store_path = _store(store)
    if kind is None and name is None:
        found = krung.Store(store_path).get(run_id)
        rung = found.rung("artifacts")
        rows = rung.figures.get("per_kernel", []) if rung else []
        if kernel:
            rows = [r for r in rows if kernel.lower() in r["kernel"].lower()]
        files = krung.run_files(found.run_id, kernel=kernel, store=store_path)
        if json_output:
            _print_json({"run_id": found.run_id, "kernels": rows,
                         "files": [f.to_json() for f in files]})
            return
        _print_kernels(found.run_id, rung, rows)
        for file in files:
            out.print(f"  {file.name}  ({file.kind}, {file.size} bytes)", markup=False)
        return
    if name is None and not json_output:
        # Several files of the kind (a kernel's specialisations, several kernels): all of
        # them, each under a header line, as `head` prints several files.
        chosen = krung.run_files(run_id, kind=kind, kernel=kernel, store=store_path)
        if len(chosen) > 1:
            for file in chosen:
                sys.stdout.write(f"==> {file.name} <==\n")
                _print_file(run_id, file.name, None, None, store_path, json_output)
            return
    _print_file(run_id, name, kind, kernel, store_path, json_output)


def _print_file(run_id: str, name: str | None, kind: str | None, kernel: str | None,
                store_path: Path, json_output: bool) -> None:
    offset = 0
    while True:  # the whole file, in the pieces read_run_file gives
        read = krung.read_run_file(run_id, name=name, kind=kind, kernel=kernel, offset=offset,
                                   store=store_path)
        if read.get("binary"):
            raise krung.UsageError(f"{read['name']} is {read['kind']}, a binary format",
                                   hint="ask for its text form: --kind sass (or ptx)")
        if json_output:
            _print_json(read)
            return
        sys.stdout.write(read["text"])
        if read.get("next_offset") is None:
            return
        offset = read["next_offset"]


def diff(
    run_a: Annotated[str, typer.Argument(help="The first run (usually the older).")],
    run_b: Annotated[str, typer.Argument(help="The second run.")],
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", help="Code to diff per kernel: sass (default), ptx, ttir, ttgir, llir; "
                       "repeat for several.")] = None,
    kernel: KernelOption = None,
    context: Annotated[int, typer.Option(help="Lines of context around each change.")] = 3,
    json_output: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Two runs compared: the source diff, the figure deltas per rung and per kernel, and
    each kernel's SASS (or PTX) diff."""
    kinds = tuple(kind or ["sass"])
    found = krung.diff_runs(run_a, run_b, context=context, store=_store(store), kinds=kinds,
                            kernel=kernel)
    if json_output:
        _print_json(found)
        return
    out.print(found["summary"], markup=False)
    for rung in found["rungs"]:
        figures = "  ".join(f"{k} {format_value(p['a'])} -> {format_value(p['b'])}"
                            for k, p in rung["figures"].items() if p["delta"])
        out.print(f"[{rung['name']}] {rung['a']} -> {rung['b']}"
                  + (f"  {figures}" if figures else ""), markup=False)
    if not found["same_source"]:
        out.print()
        sys.stdout.write(found["source_diff"])
    for entry in found["kernels"]:
        out.print()
        label = entry["kernel"] + (f" ({entry['function']})" if entry.get("function") and
                                   entry["function"] != entry["kernel"] else "")
        if entry.get("only_in"):
            out.print(f"kernel {label}: only in run {entry['only_in']}", markup=False)
            continue
        changed = {k: p for k, p in entry["figures"].items() if p["delta"]}
        out.print(f"kernel {label}: {entry['a']} -> {entry['b']}", markup=False)
        out.print("  " + ("  ".join(f"{k} {format_value(p['a'])} -> {format_value(p['b'])}"
                                    for k, p in changed.items()) or "same figures"),
                  markup=False)
        for k in kinds:
            text = entry.get(f"{k}_diff")
            if text:
                sys.stdout.write(text)
            elif text == "":
                out.print(f"  same {k}", markup=False)


def _print_kernels(run_id: str, rung: Any, rows: list[dict[str, Any]]) -> None:
    if rung is None:
        out.print(f"run {run_id} has no artifacts rung: run it with --rungs ...,artifacts",
                  markup=False)
        return
    out.print(rung.line(), markup=False)
    if not rows:
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("kernel")
    table.add_column("specialisation")
    for column in ARTIFACT_COLUMNS:
        table.add_column(column, justify="left" if column == "highlights" else "right")
    for row in rows:
        if row.get("error"):
            blanks = [""] * (len(ARTIFACT_COLUMNS) - 1)  # the message in the last column
            table.add_row(row["kernel"], str(row.get("specialisation")), *blanks,
                          f"error: {row['error'][:120]}")
            continue
        label = row["kernel"] if row.get("function") in (None, row["kernel"]) else \
            f"{row['kernel']}:{row['function']}"
        table.add_row(label, str(row.get("specialisation")),
                      *(format_value(row.get(c)) for c in ARTIFACT_COLUMNS))
    out.print(table)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def _store(store: Path | None) -> Path:
    return store or krung.Settings.from_env().store
