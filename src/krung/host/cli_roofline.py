"""The `krung calibrate` and `krung report` commands: the device's ceilings, and the HTML
report of a problem's versions.

cli.py registers them; like every front end they call only the public API (krung/__init__).
Errors are raised as krung errors, which cli.main prints as `Type: message` and a hint.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

import krung
from krung.host.options import StoreOption

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)



def _store(store: Path | None) -> Path:
    return store or krung.Settings.from_env().store


def calibrate(
    force: Annotated[bool, typer.Option(
        "--force", help="Measure again even if the store has this device's ceilings.")] = False,
    list_kept: Annotated[bool, typer.Option(
        "--list", help="Print the calibrations kept in the store (needs no GPU).")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    store: StoreOption = None,
) -> None:
    """Measure this GPU's ceilings (DRAM and L2 bandwidth, cuBLAS matmul throughput per
    precision) once per device, driver and library versions, keep them in the store, and
    print them beside the datasheet."""
    if list_kept:
        kept = krung.calibrations(store=_store(store))
        if json_output:
            sys.stdout.write(json.dumps([c.to_json() for c in kept], indent=2) + "\n")
        elif not kept:
            out.print("no calibrations in this store: run `krung calibrate` on a GPU",
                      markup=False)
        for calibration in [] if json_output else kept:
            _print_calibration(calibration)
        return
    calibration = krung.calibrate(force=force, store=_store(store))
    if json_output:
        sys.stdout.write(json.dumps(calibration.to_json(), indent=2) + "\n")
        return
    _print_calibration(calibration)


def _print_calibration(calibration: krung.Calibration) -> None:
    key = calibration.key
    how = "kept in the store" if calibration.cached else "measured now"
    out.print(f"{key['device_name']}  driver {key['driver'] or '?'}  torch {key['torch']}  "
              f"CUDA {key['cuda']}  ({how}, {calibration.measured_at})", markup=False)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ceiling", "measured", "datasheet", "measured/datasheet", "how"):
        table.add_column(column, justify="right" if column.startswith("meas") or
                         column == "datasheet" else "left")
    for row in calibration.beside_datasheet():
        ratio = row["pct_of_datasheet"]
        table.add_row(row["ceiling"], _rate(row["measured"], row["unit"]),
                      _rate(row["datasheet"], row["unit"]),
                      f"{ratio:.0f}%" if ratio else "-", row.get("note") or row["what"])
    out.print(table)
    warning = (calibration.record.get("clock") or {}).get("warning")
    if warning:
        out.print(f"warning: {warning}; `krung calibrate --force` measures again", markup=False)


def _rate(value: float | None, unit: str) -> str:
    """4.31 TB/s, 790 TFLOP/s, 4.18 Top/s, or '-'."""
    if not value:
        return "-"
    return f"{value / 1e12:.3g} T{unit}"


def report(
    problem: Annotated[str, typer.Argument(help="Problem name (its directory's name), or its "
                                                "directory.")],
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="The HTML file to write.")] = Path("report.html"),
    png: Annotated[Path | None, typer.Option(
        "--png", metavar="DIR", help="Also write the charts as PNG files in DIR "
                                     "(needs krung[report]: matplotlib).")] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs, newest first.")] = 200,
    json_output: Annotated[bool, typer.Option("--json", help="Print what was written as "
                                                             "JSON.")] = False,
    store: StoreOption = None,
) -> None:
    """Write one self-contained HTML page of a problem's versions: the roofline chart, the
    timeline (time, speedup, % of roofline), each version's rungs, error figures and
    artifact links."""
    files = krung.write_report(problem, output, png_dir=png, limit=limit, store=_store(store))
    if json_output:
        sys.stdout.write(json.dumps(files.to_json(), indent=2) + "\n")
        return
    out.print(f"wrote {files.html} ({files.runs} run(s))", markup=False)
    for path in files.pngs:
        out.print(f"wrote {path}", markup=False)
