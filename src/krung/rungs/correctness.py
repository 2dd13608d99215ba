"""correctness: every test case, with several fresh seeds each, against the reference.

Inputs are drawn fresh for every (case, seed) from the evaluation's secret seed, so no two
evaluations see the same data. Each output is compared in float64 under the per-dtype policy
(krung.tolerance, overridable by the problem). A failing case stops its remaining seeds but
not the other cases, so the report shows every case that fails.
"""

from __future__ import annotations

from typing import Any

from krung import tolerance
from krung.contract import check_outputs
from krung.errors import RungFailed
from krung.ladder import Context
from krung.metrics import Comparison, compare
from krung.problem import case_label

NEEDS = ("run",)


def run(ctx: Context) -> dict[str, Any]:
    cases = ctx.problem.test_cases
    seeds = ctx.settings.seeds
    rows: list[dict[str, Any]] = []
    failures: list[tuple[dict, int, int, Comparison]] = []
    worst: tuple[float, dict, Comparison] | None = None
    for index, case in enumerate(cases):
        label = case_label(case)
        ctx.progress("correctness", f"case {index + 1}/{len(cases)} {label}")
        row: dict[str, Any] = {"case": label, "seeds": 0, "passed": True}
        for rep in range(seeds):
            inputs = ctx.make_inputs(case, ctx.seed_for("correctness", index, rep))
            expected = ctx.expected(inputs)
            what = f"case {label}, seed #{rep}"
            reply = ctx.call(inputs, what)
            check_outputs(reply, expected, ctx.device, what)
            row["seeds"] += 1
            for out_index, (out, ref) in enumerate(zip(reply["outputs"], expected, strict=True)):
                policy = tolerance.resolve(str(ref.dtype).removeprefix("torch."),
                                           ctx.problem.tolerance)
                result = compare(out, ref, policy)
                _merge(row, result.figures)
                score = result.figures.get("max_abs_err", 0.0)
                if worst is None or score > worst[0]:
                    worst = (score, case, result)
                if not result.passed:
                    row["passed"] = False
                    failures.append((case, rep, out_index, result))
            if not row["passed"]:
                break
        rows.append(row)
    figures = _summary(rows, seeds, worst)
    if failures:
        raise _mismatch(failures, rows, figures)
    return figures


def _merge(row: dict[str, Any], figures: dict[str, Any]) -> None:
    """Keep the worst of each figure over the seeds and outputs of one case."""
    worse_if_higher = ("max_abs_err", "max_rel_err", "mse", "rmse", "mismatches", "nonfinite")
    for key in worse_if_higher:
        if key in figures:
            row[key] = max(row.get(key, 0), figures[key])
    for key in ("psnr_db", "cossim"):
        if key in figures and figures[key] is not None:
            row[key] = min(row.get(key, figures[key]), figures[key])


def _summary(rows: list[dict[str, Any]], seeds: int, worst: Any) -> dict[str, Any]:
    figures: dict[str, Any] = {"cases": len(rows), "seeds": seeds,
                               "passed": sum(r["passed"] for r in rows)}
    for key in ("max_abs_err", "max_rel_err", "mse", "rmse"):
        figures[key] = max((r.get(key, 0.0) for r in rows), default=0.0)
    psnrs = [r["psnr_db"] for r in rows if "psnr_db" in r]
    figures["psnr_db"] = min(psnrs) if psnrs else None
    cossims = [r["cossim"] for r in rows if "cossim" in r]
    figures["cossim"] = min(cossims) if cossims else None
    if worst is not None:
        figures["worst_case"] = case_label(worst[1])
    figures["per_case"] = rows
    return figures


def _mismatch(failures: list, rows: list[dict[str, Any]], figures: dict[str, Any]) -> RungFailed:
    case, rep, out_index, result = failures[0]
    failed = [r["case"] for r in rows if not r["passed"]]
    output = f" output {out_index}" if out_index else ""
    at = ""
    if result.first_mismatch is not None:
        at = (f"; first mismatch at {tuple(result.first_mismatch)}: got {result.got:.6g}, "
              f"expected {result.expected:.6g}")
    message = (f"{len(failed)}/{len(rows)} test cases fail; {case_label(case)} seed #{rep}"
               f"{output}: {result.reason}{at}")
    figures["failed_cases"] = failed
    figures["first_mismatch"] = result.first_mismatch
    figures["mismatch_region"] = result.region or None
    details = f"mismatches by dimension: {result.region}" if result.region else None
    return RungFailed("Mismatch", message, _hint(result, rows), details=details, figures=figures)


def _hint(result: Comparison, rows: list[dict[str, Any]]) -> str:
    if result.figures.get("nonfinite"):
        return ("NaN/Inf where the reference is finite: look for reads of unwritten memory "
                "(masked loads without `other`, padding lanes that reach a reduction) or overflow")
    passed = [r["case"] for r in rows if r["passed"]]
    if passed:
        return ("some cases pass and others fail: compare their sizes; tails that are not a "
                "multiple of the block size usually point at a mask or a loop bound")
    return "every case fails: check the algorithm against the reference on the smallest case"
