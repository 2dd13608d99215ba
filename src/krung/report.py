"""Runs as text for people and agents: rung lines, per-case tables, history.

Plain strings and rich tables only; the CLI decides where they go. JSON is Run.to_json.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from krung.results import Run, RungResult, Status, format_value
from krung.store import summary_of

DETAIL_LINES = 24


def device_notice(env: dict[str, Any]) -> str:
    if env.get("device") == "cpu":
        return ("device: cpu (no GPU in use): Triton kernels run under Triton's interpreter on "
                "CPU tensors, and timings are CPU wall-clock time, not GPU time")
    name = env.get("device_name", "cuda")
    extra = ", ".join(f"{k} {env[k]}" for k in ("driver", "torch", "triton") if env.get(k))
    return f"device: {name} ({extra})" if extra else f"device: {name}"


def rung_block(result: RungResult) -> list[str]:
    """The rung's line, and for a failure where it happened, the hint and the details."""
    lines = [result.line()]
    if result.status is Status.FAILED:
        if result.hint:
            lines.append(f"    hint: {result.hint}")
        if result.details:
            detail = result.details.rstrip().splitlines()
            if len(detail) > DETAIL_LINES:
                detail = ["...", *detail[-DETAIL_LINES:]]
            lines += [f"    | {line}" for line in detail]
    return lines


def verdict(run: Run) -> str:
    if run.error:
        return f"ERROR  run {run.run_id}: {run.error}"
    failed = [r.name for r in run.rungs if r.status is Status.FAILED]
    if failed:
        return f"FAILED  run {run.run_id}: {', '.join(failed)} failed"
    return f"OK  run {run.run_id}: every rung passed"


def case_table(result: RungResult) -> Table | None:
    """The per-case figures of a rung (correctness, benchmark) as a table."""
    rows = result.figures.get("per_case")
    if not rows:
        return None
    columns = _COLUMNS.get(result.name) or [k for k in rows[0] if k != "case"]
    table = Table(title=f"{result.name} per case", title_justify="left", box=None,
                  header_style="bold", pad_edge=False)
    table.add_column("case")
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(str(row["case"]), *(format_value(row.get(c)) for c in columns))
    return table


_COLUMNS = {
    "correctness": ["passed", "seeds", "max_abs_err", "max_rel_err", "psnr_db", "cossim",
                    "mismatches"],
    "benchmark": ["median_us", "p10_us", "p90_us", "ci_pct", "samples", "ref_median_us",
                  "speedup", "timer", "host_median_us"],
}


def history_table(runs: list[Run], title: str) -> Table:
    table = Table(title=title, title_justify="left", box=None, header_style="bold",
                  pad_edge=False)
    for column in ("run", "started", "version", "verdict", "time (geomean)", "speedup",
                   "device"):
        table.add_column(column, justify="right" if column in ("speedup",) else "left")
    for run in runs:
        summary = summary_of(run)
        verdict_text = summary["verdict"]
        if summary["failed_rung"]:
            verdict_text += f" ({summary['failed_rung']})"
        time_text = "-"
        if summary["geomean_us"] is not None:
            time_text = f"{format_value(summary['geomean_us'])} us"
            if summary["timer"] == "cpu-wall":
                time_text += " cpu"
        speedup = summary["speedup"]
        table.add_row(run.run_id, run.started_at.replace("T", " ")[:19],
                      run.solution.rsplit("/", 1)[-1], verdict_text, time_text,
                      f"{speedup:.3g}x" if speedup else "-", run.device)
    return table
