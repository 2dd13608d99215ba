"""benchmark: time the version and the reference on every bench case, the same way.

Each bench case is first checked once against the reference (bench sizes are often larger
than test sizes), then the version is timed in its worker and the reference in the judge
with the same protocol (krung.timing). On a GPU that is CUDA events with an L2 flush before
every sample; on a CPU it is wall-clock time of the interpreted kernel, labelled `cpu-wall`.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from functools import partial
from typing import Any

from krung import tolerance
from krung.contract import check_outputs
from krung.errors import RungFailed
from krung.ladder import Context, failure
from krung.metrics import compare
from krung.problem import case_label
from krung.timing import TimingPlan, time_call

NEEDS = ("correctness",)

GPU_PLAN = TimingPlan(warmup_s=0.05, budget_s=0.2, min_samples=10, max_samples=500)
# Interpreted kernels are slow and their time says little: a few samples are enough.
CPU_PLAN = TimingPlan(warmup_s=0.0, budget_s=0.3, min_samples=3, max_samples=100)


def run(ctx: Context) -> dict[str, Any]:
    plan = CPU_PLAN if ctx.device == "cpu" else GPU_PLAN
    cases = ctx.problem.bench_cases_for(ctx.device)
    rows = []
    clock = None
    for index, case in enumerate(cases):
        label = case_label(case)
        ctx.progress("benchmark", f"case {index + 1}/{len(cases)} {label}")
        inputs = ctx.make_inputs(case, ctx.seed_for("benchmark", index))
        _check_once(ctx, inputs, f"bench case {label}")
        what = f"timing bench case {label}"
        # The worker still holds these inputs from the check: no second transfer.
        reply = ctx.candidate.request({"op": "time", "inputs": None, "plan": asdict(plan)},
                                      ctx.settings.bench_timeout_s, what)
        if not reply.get("ok"):
            raise failure(reply["error"], what)
        mine = reply["timing"]
        ref = time_call(partial(ctx.problem.reference, *inputs), ctx.device, plan).to_json()
        clock = mine["clock"]
        rows.append({
            "case": label,
            "median_us": mine["median_us"], "p10_us": mine["p10_us"], "p90_us": mine["p90_us"],
            "cv": mine["cv"], "samples": mine["samples"],
            "ref_median_us": ref["median_us"],
            "speedup": ref["median_us"] / mine["median_us"] if mine["median_us"] > 0 else None,
            "l2_flush_bytes": mine["l2_flush_bytes"],
        })
    return {
        "clock": clock,
        "cases": len(rows),
        "geomean_us": _geomean([r["median_us"] for r in rows]),
        "speedup": _geomean([r["speedup"] for r in rows if r["speedup"]]),
        "per_case": rows,
    }


def _check_once(ctx: Context, inputs: tuple, what: str) -> None:
    expected = ctx.expected(inputs)
    reply = ctx.call(inputs, what, timeout=ctx.settings.bench_timeout_s)
    check_outputs(reply, expected, ctx.device, what)
    for out, ref in zip(reply["outputs"], expected, strict=True):
        policy = tolerance.resolve(str(ref.dtype).removeprefix("torch."), ctx.problem.tolerance)
        result = compare(out, ref, policy)
        if not result.passed:
            raise RungFailed("Mismatch", f"{what}: {result.reason}",
                             "the version is wrong at this bench size though right on the test "
                             "cases: look for index overflow or size-dependent code paths",
                             figures=result.figures)


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
