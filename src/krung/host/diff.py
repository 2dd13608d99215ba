"""Two runs side by side: what changed in the version's source, and what that did to the
figures of each rung and to the code its compiler made (krung.host.kernel_diff).

Deltas are `b - a` and ratios `b / a`, so with `a` the older run a time ratio below 1 means
`b` is faster.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from krung.host.kernel_diff import kernel_diffs
from krung.host.store import Store, opened
from krung.protocol.results import Run, RungResult

# Per-case figures worth comparing, per rung (the others are noise for a diff).
CASE_FIGURES = {
    "correctness": ("max_abs_err", "max_rel_err", "mismatches"),
    "benchmark": ("median_us", "ref_median_us", "speedup"),
}
MAX_DIFF_LINES = 400


def diff_runs(run_a: str, run_b: str, *, context: int = 3,
              store: str | Path | Store | None = None, kinds: tuple[str, ...] = ("sass",),
              kernel: str | None = None) -> dict[str, Any]:
    """Compare two runs (ids or unique prefixes): source diff and figure deltas per rung,
    and per kernel both captured (artifacts rung) the deltas of its figures and the diff of
    its `kinds` of code (sass, ptx, ttir, ttgir, llir)."""
    with opened(store) as db:
        a, b = db.get(run_a), db.get(run_b)
        folders = (db.artifacts_dir(a.run_id, create=False),
                   db.artifacts_dir(b.run_id, create=False))
    result = compare(a, b, context)
    result["kernels"] = kernel_diffs(a, b, folders, kinds, kernel, context)
    return result


def compare(a: Run, b: Run, context: int = 3) -> dict[str, Any]:
    lines = list(difflib.unified_diff(
        a.source.splitlines(keepends=True), b.source.splitlines(keepends=True),
        fromfile=f"{a.run_id}:{a.solution}", tofile=f"{b.run_id}:{b.solution}",
        n=max(context, 0)))
    cut = len(lines) > MAX_DIFF_LINES
    if cut:
        lines = [*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more lines)\n"]
    names = [r.name for r in a.rungs] + [r.name for r in b.rungs if a.rung(r.name) is None]
    rungs = [_rung_delta(name, a.rung(name), b.rung(name)) for name in names]
    return {
        "a": _brief(a), "b": _brief(b),
        "same_source": a.source_sha256 == b.source_sha256,
        "same_problem": a.problem_path == b.problem_path,
        "same_device": a.device == b.device,
        "source_diff": "".join(line if line.endswith("\n") else line + "\n" for line in lines),
        "source_diff_truncated": cut,
        "rungs": rungs,
        "summary": _summary(a, b),
    }


def _brief(run: Run) -> dict[str, Any]:
    return {"run_id": run.run_id, "solution": run.solution, "problem": run.problem,
            "device": run.device, "ok": run.ok, "started_at": run.started_at}


def _rung_delta(name: str, a: RungResult | None, b: RungResult | None) -> dict[str, Any]:
    delta: dict[str, Any] = {"name": name, "a": a.status.value if a else None,
                             "b": b.status.value if b else None, "figures": {}}
    if a is None or b is None:
        return delta
    for key, value in a.figures.items():
        other = b.figures.get(key)
        if _number(value) and _number(other):
            delta["figures"][key] = _pair(value, other)
    rows_a = {r["case"]: r for r in a.figures.get("per_case") or []}
    rows_b = {r["case"]: r for r in b.figures.get("per_case") or []}
    keys = CASE_FIGURES.get(name, ())
    cases = []
    for case in [c for c in rows_a if c in rows_b]:
        pairs = {k: _pair(rows_a[case][k], rows_b[case][k]) for k in keys
                 if _number(rows_a[case].get(k)) and _number(rows_b[case].get(k))}
        if pairs:
            cases.append({"case": case, **pairs})
    if cases:
        delta["per_case"] = cases
    return delta


def _pair(a: float, b: float) -> dict[str, Any]:
    pair: dict[str, Any] = {"a": a, "b": b, "delta": b - a}
    if a:
        pair["ratio"] = b / a
    return pair


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _summary(a: Run, b: Run) -> str:
    """One sentence: what the change did."""
    parts = []
    verdict = {True: "passes", False: "fails"}
    if a.ok != b.ok:
        parts.append(f"{b.run_id} {verdict[b.ok]} where {a.run_id} {verdict[a.ok]}")
    bench_a, bench_b = a.rung("benchmark"), b.rung("benchmark")
    if bench_a and bench_b and bench_a.ok and bench_b.ok:
        time_a, time_b = bench_a.figures.get("geomean_us"), bench_b.figures.get("geomean_us")
        if time_a and time_b:
            change = (f"{time_a / time_b:.3g}x faster" if time_b <= time_a
                      else f"{time_b / time_a:.3g}x slower")
            parts.append(f"{b.run_id} is {change} than {a.run_id} (geomean of bench-case "
                         f"medians)")
        if a.device != b.device:
            parts.append("the runs are on different devices, so their times do not compare")
    if not parts:
        parts.append("same verdict; no benchmark on both runs to compare")
    return "; ".join(parts)
