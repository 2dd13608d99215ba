"""The code paths a run's bench cases take that no check ran: a verdict must name them.

On a CPU the correctness rung checks each bench case's shape once at a size the interpreter
affords; one it cannot afford is named in its `bench_paths_unchecked` figure. The artifacts
rung finds what each bench case launches from its shapes alone; a Triton specialisation that
only bench cases launch and that never ran here has `ran: false`. Either way the version
passed without its GPU path being checked, and every report says so (`Run.unchecked_paths`).
"""

from __future__ import annotations

import re
from typing import Any

BENCH_SUFFIX = " (bench)"  # how the artifacts rung's `cases` marks a bench case
_COST = re.compile(r"~([0-9.]+) s")


def unchecked_paths(rungs: list[Any]) -> list[dict[str, Any]]:
    """`{case, path, why, rung}` per bench case and path never checked, from the rungs'
    figures (RungResult objects), in ladder order."""
    found: list[dict[str, Any]] = []
    for rung in rungs:
        if rung.name == "correctness":
            found += _from_correctness(rung.figures.get("bench_paths_unchecked") or "")
        elif rung.name == "artifacts":
            found += _from_artifacts(rung.figures.get("per_kernel") or [])
    return found


def _from_correctness(text: str) -> list[dict[str, Any]]:
    """`label: its smallest form X would take ~N s; ...` (krung.judge.problem.cpu_budget)."""
    entries = []
    for part in filter(None, (p.strip() for p in text.split("; "))):
        case, _, why = part.partition(": ")
        cost = _COST.search(why)
        entries.append({"case": case, "path": "its shape",
                        "why": f"not checked: {why}" if why else "not checked",
                        "rung": "correctness",
                        **({"cost_s": float(cost.group(1))} if cost else {})})
    return entries


def _from_artifacts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    entries = []
    for row in rows:
        if row.get("ran") is not False:
            continue
        path = f"Triton kernel {row.get('kernel')} [{row.get('specialisation')}]"
        for case in row.get("cases") or []:
            if case.endswith(BENCH_SUFFIX):
                entries.append({"case": case[:-len(BENCH_SUFFIX)], "path": path,
                                "why": "only bench cases launch it; compiled from their "
                                       "shapes, never run on this machine",
                                "rung": "artifacts"})
    return entries


def describe(paths: list[dict[str, Any]]) -> str:
    """The paths in words, by bench case: `bench case C: PATH (WHY), PATH (WHY); ...`."""
    by_case: dict[str, list[str]] = {}
    for entry in paths:
        by_case.setdefault(entry["case"], []).append(f"{entry['path']} ({entry['why']})")
    return "; ".join(f"bench case {case}: {', '.join(said)}" for case, said in by_case.items())
