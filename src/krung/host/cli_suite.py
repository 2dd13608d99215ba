"""The `krung suite` command: every problem of a directory that has a solution, scored the
way KernelBench scores (correctness rate, fast_0, fast_1, fast_2, geometric-mean speedup).

cli.py registers it; like every front end it calls only the public API (krung/__init__).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

import krung
from krung.host import options
from krung.host.cli_scale import choose_executor

OK, FAILED, INTERNAL = 0, 1, 3  # cli.ExitCode

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


@options.takes(*options.SUITE)
def suite(
    problems_dir: Annotated[Path, typer.Argument(help="A directory of problems: KernelBench "
                                                      "files, GPU MODE or krung problem "
                                                      "directories.")],
    **given: Any,
) -> None:
    """Evaluate every problem that has a solution and print KernelBench's scores (the speed
    scores need the benchmark rung); with --executor, --workers or --gpus, several at once,
    as `krung batch` does."""
    settings = options.settings_of(given)
    json_output = given["json_output"]

    done = 0

    def progress(entry: krung.SuiteEntry) -> None:
        # with --json, stdout holds the one JSON object: progress goes to stderr
        nonlocal done
        done += 1
        line = f"{entry.problem}: {entry.verdict()}"
        if json_output:
            reason = entry.reason()
            sys.stderr.write(f"[{done}] {line}{f' ({reason})' if reason else ''}\n")
            sys.stderr.flush()
        else:
            out.print(line, markup=False)

    def running(at_work: list[Any]) -> None:
        # every 30 s, what runs and for how long: a slow problem is seen, never a silence
        now = time.monotonic()
        jobs = "; ".join(f"{Path(r.job.problem).stem} {now - r.since:.0f} s {r.at}"
                         for r in at_work)
        sys.stderr.write(f"running {len(at_work)} ({done} done): {jobs or '-'}\n")
        sys.stderr.flush()

    chosen = choose_executor(given)
    result = krung.run_suite(problems_dir, given["solutions"], precision=given["precision"],
                             rungs=given["rungs"], device=given["device"], settings=settings,
                             executor=chosen, on_entry=progress, on_running=running)
    if json_output:
        sys.stdout.write(json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n")
    else:
        out.print()
        out.print(_table(result))
        for line in _score_lines(result):
            out.print(line, markup=False)
    if result.krung_failed:
        raise typer.Exit(INTERNAL)
    raise typer.Exit(OK if result.ok else FAILED)


def _table(result: krung.SuiteResult) -> Table:
    table = Table(title=f"suite {result.problems_dir} with {result.solutions_dir}",
                  title_justify="left", box=None)
    for name in ("problem", "correct", "verdict", "speedup", "median_us", "run"):
        table.add_column(name, justify="right" if name in ("speedup", "median_us") else "left")
    for entry in result.entries:
        row = entry.to_json()
        table.add_row(entry.problem, "yes" if entry.correct else "no", row["verdict"],
                      _fmt(row["speedup"]), _fmt(row["median_us"]), row["run_id"] or "-")
    return table


def _score_lines(result: krung.SuiteResult) -> list[str]:
    s = result.scores
    precision = f", precision {result.precision}" if result.precision else ""
    lines = [f"KernelBench scores over {s['problems']} problem(s) with a solution{precision}:",
             f"  correctness {s['correct']}/{s['problems']} = {_fmt(s['correctness'])}"]
    if s["krung_errors"]:
        lines.append(f"  krung failed on {s['krung_errors']} more (not counted above: no "
                     "verdict on their solutions; each says why)")
    if result.timed:
        lines.append("  " + "  ".join(f"fast_{p} {_fmt(s[f'fast_{p}'])}" for p in (0, 1, 2)))
        lines.append(f"  geomean speedup {_fmt(s['geomean_speedup'])} (over the correct ones)")
    else:
        lines.append("  speed scores need the benchmark rung")
    if result.without_solution:
        lines.append(f"  no solution for: {', '.join(result.without_solution)}")
    if result.without_problem:
        lines.append(f"  solutions without a problem: {', '.join(result.without_problem)}")
    return lines


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
