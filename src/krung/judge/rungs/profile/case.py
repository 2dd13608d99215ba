"""Which bench case the profile rung profiles: the one furthest from the roofline.

The profile costs tens of seconds, so it looks at one case, and the case worth looking at is
the one with the most to gain: the lowest % of roofline, from the benchmark rung's times and
the ceilings the roofline rung would use (krung.judge.rungs.roofline.case_rows). The ceilings
are the store's calibration for this device; without one, the GPU's datasheet peaks (nothing
is measured here: that would spend the profile's time limit); for a GPU krung has no
datasheet for, the case with the lowest speedup over the reference; without benchmark
figures, the first case. The figures say which rule chose it.
"""

from __future__ import annotations

from typing import Any

from krung.judge.device import datasheet_for
from krung.judge.ladder import Context
from krung.judge.problem import case_label
from krung.judge.rungs.roofline import case_rows, kept_ceilings
from krung.judge.rungs.roofline.model import Ceilings


def choose_case(ctx: Context) -> tuple[dict, dict[str, Any]]:
    """The case to profile, and figures saying why: `case_chosen_by`, and the case's
    `case_pct_of_roofline` where it was chosen by that."""
    cases = ctx.problem.bench_cases_for(ctx.device)
    bench = ctx.results.get("benchmark")
    if len(cases) == 1:
        return cases[0], {"case_chosen_by": "the only bench case"}
    if bench is None or not bench.ok:
        return cases[0], {"case_chosen_by": "the first bench case (no benchmark figures to "
                                            "rank the cases by: climb benchmark too)"}
    by_label = {case_label(c): c for c in cases}
    ceilings, source = _ceilings(ctx)
    if ceilings is not None:
        rows = [r for r in case_rows(ctx, bench.figures, ceilings,
                                     ctx.settings.roofline_threshold_pct)
                if r.get("pct") is not None and r["case"] in by_label]
        if rows:
            worst = min(rows, key=lambda r: r["pct"])
            return by_label[worst["case"]], {
                "case_chosen_by": f"the lowest % of roofline of {len(rows)} bench cases "
                                  f"({source})",
                "case_pct_of_roofline": round(worst["pct"], 1)}
    timed = [r for r in bench.figures.get("per_case") or []
             if r.get("speedup") and r.get("case") in by_label]
    if timed:
        worst = min(timed, key=lambda r: r["speedup"])
        return by_label[worst["case"]], {
            "case_chosen_by": f"the lowest speedup over the reference of {len(timed)} bench "
                              "cases (no ceilings known for this GPU)"}
    return cases[0], {"case_chosen_by": "the first bench case (no bench case was timed)"}


def _ceilings(ctx: Context) -> tuple[Ceilings | None, str]:
    """The store's calibration for this device, else its datasheet's peaks, else none."""
    kept = kept_ceilings(ctx)
    if kept is not None:
        return kept, "measured ceilings"
    sheet = datasheet_for(str(ctx.env.get("device_name") or ""))
    if sheet is None:
        return None, ""
    return Ceilings(dram_bytes_per_s=sheet.dram_bytes_per_s, flops_per_s=sheet.flops_per_s,
                    pipes_per_s=dict(sheet.pipes_per_s), source="datasheet"), \
        "datasheet peaks: no calibration kept for this GPU yet"
