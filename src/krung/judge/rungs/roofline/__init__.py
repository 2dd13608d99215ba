"""roofline: how far each bench case is from what the GPU allows (krung.judge.rungs.roofline.model).

Per bench case: the problem's flops(case) and bytes_moved(case), the benchmark rung's
median time, and the device's measured ceilings give the achieved TFLOP/s and GB/s, the
arithmetic intensity, the ceiling that binds (DRAM bandwidth, or the compute ceiling the
version's kernels can reach: the tensor-core peak of the case's precision when their SASS
has tensor-core instructions, else the pipe their mix keeps busiest, krung.judge.rungs.
roofline.pipes; the dtype's peak, marked as assumed, where the artifacts rung gave no SASS),
the % of it reached, and a verdict: at the roofline (>= the threshold,
KRUNG_ROOFLINE_THRESHOLD, 90% by default) or how far below it, with the likely limiter
(krung.judge.rungs.roofline.limiter: rules over the benchmark's launch and kernel counts,
the position, and Nsight Compute's counters for the case the profile rung profiled). A case
faster than the ceilings allow fails the rung as suspect.

Compute-bound time follows the SM clock, and the ceilings were measured near the top clock:
each case's time at the top clock (`median_us_at_max_clock`) scales the compute share of its
roofline time (compute / (compute + memory)) by the clock its samples ran at over NVML's
top clock, and a compute-bound case is placed with it. `next_step` names the number to beat
on the worst case and the first thing to try (krung.judge.rungs.roofline.next_step).

The ceilings come from the store; the first evaluation on a device (driver, library
versions) measures them here, with the code of `krung calibrate`, and sends them to the
caller to keep. Without a GPU there are no ceilings, and the rung is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.problem import case_label
from krung.judge.rungs.roofline import model as roofline
from krung.judge.rungs.roofline import pipes
from krung.judge.rungs.roofline.calibration import beside_datasheet, find, key_of
from krung.judge.rungs.roofline.model import Ceilings, ComputeCeiling, Point, dtype_ceiling
from krung.judge.rungs.roofline.next_step import next_step
from krung.judge.rungs.spec import HTML, NOTE, TABLES, Figure, RungSpec
from krung.protocol.errors import RungFailed

_PLACED = "for a placed case"
SPEC = RungSpec(
    "roofline", order=90, needs=("benchmark",), gpu_only=True, exclusive_gpu=True,
    checks="each bench case's median time against the GPU's measured ceilings "
           "(docs/roofline.md): the binding ceiling (DRAM bandwidth, or the compute ceiling "
           "the kernels' SASS can reach), the % of it reached, and the likely limiter; "
           "skipped on a CPU, without failing the run; a time faster than the ceilings allow "
           "fails as `SuspectTime`",
    per="bench case",
    figures=(
        Figure("verdict", "", "at-roofline: every bench case reaches the threshold; below; "
               "suspect: a case is faster than the ceilings allow", "text",
               choices=("at-roofline", "below", "suspect")),
        Figure("pct_of_roofline", "%", "the geometric mean over the bench cases of the % of "
               "the binding ceiling reached"),
        Figure("at_roofline", "", "the cases at the roofline, of those placed: `n/m`", "text"),
        Figure("threshold_pct", "%", "the % of the binding ceiling that counts as at the "
               "roofline (KRUNG_ROOFLINE_THRESHOLD)"),
        Figure("worst_case", "", "the case furthest from its roofline", "text"),
        Figure("limiter", "", "the likely limiter of the furthest case (of the suspect one, "
               "if any)", "text"),
        Figure("compute_ceilings", "", "the compute ceilings the cases were placed under, "
               "each with what chose it and its cases", "list"),
        Figure("ceilings_from", "", "where the ceilings come from: measured now, or kept in "
               "the store", "text"),
        Figure("ceilings", "", "the ceilings, measured and the datasheet's, with the one "
               "used", "list"),
        Figure("next_step", "", "the number to beat on the furthest case and the first thing "
               "to try", "text"),
        Figure("case", "", "the bench case", "text", per_case=True, required=True),
        Figure("precision", "", "the precision its work runs in (fp32, tf32, bf16, ...)",
               "text", per_case=True, shown=(HTML,)),
        Figure("flops", "FLOP", "the problem's flops(case)", per_case=True),
        Figure("bytes_moved", "B", "the problem's bytes_moved(case)", per_case=True),
        Figure("median_us", "us", "the benchmark's median time", per_case=True, shown=TABLES),
        Figure("roofline_us", "us", "the least time the ceilings allow", per_case=True,
               shown=TABLES, when=_PLACED),
        Figure("tflops", "TFLOP/s", "the achieved FLOP rate", per_case=True, shown=TABLES,
               when=_PLACED),
        Figure("gbps", "GB/s", "the achieved rate of the bytes moved", per_case=True,
               shown=TABLES, when=_PLACED),
        Figure("intensity", "FLOP/B", "the arithmetic intensity: flops / bytes moved",
               per_case=True, shown=TABLES, when=_PLACED),
        Figure("ridge", "FLOP/B", "the intensity where the compute and DRAM ceilings meet",
               per_case=True, when=_PLACED),
        Figure("bound", "", "which ceiling binds at this intensity", "text", per_case=True,
               shown=TABLES, choices=("memory", "compute"), when=_PLACED),
        Figure("ceiling", "", "the binding ceiling: dram, or the compute ceiling's name",
               "text", per_case=True, shown=TABLES, when=_PLACED),
        Figure("pct", "%", "the % of the binding ceiling reached: roofline_us / median_us",
               per_case=True, shown=TABLES, when=_PLACED),
        Figure("verdict", "", "at-roofline, below or suspect; null where the case could not "
               "be placed", "text", per_case=True, required=True, shown=TABLES,
               choices=("at-roofline", "below", "suspect")),
        Figure("limiter", "", "the likely limiter, in words (or why the case was not placed)",
               "text", per_case=True, shown=(NOTE,)),
        Figure("ceiling_label", "", "the binding ceiling, for people", "text", per_case=True,
               when=_PLACED),
        Figure("compute_ceiling", "", "the compute ceiling the case was placed under: a "
               "precision's peak or a pipe", "text", per_case=True, when=_PLACED),
        Figure("compute_label", "", "that ceiling, for people", "text", per_case=True,
               when=_PLACED),
        Figure("compute_per_s", "/s", "that ceiling's rate: FLOP/s, or instructions/s of a "
               "pipe", per_case=True, when=_PLACED),
        Figure("compute_bytes_per_s", "B/s", "a pipe's ceiling as the bandwidth its "
               "instruction stream allows", per_case=True, when=_PLACED),
        Figure("ceiling_chosen_by", "", "what chose the compute ceiling: the SASS, or the "
               "dtype", "text", per_case=True, when=_PLACED),
        Figure("ceiling_assumed", "", "the compute ceiling is the dtype's, assumed (no SASS "
               "chose it)", "flag", per_case=True, when=_PLACED),
        Figure("headroom", "x", "median_us / roofline_us: how far from the roofline",
               per_case=True, when=_PLACED),
        Figure("median_us_at_max_clock", "us", "the time at the GPU's top SM clock: the "
               "compute share of the roofline time scaled by the clock it was timed at",
               per_case=True, when=_PLACED),
        Figure("clock_scaling", "", "how the time was scaled to the top clock", "text",
               per_case=True, when="when it was timed below the top clock"),
        Figure("kernel", "", "the version's kernels (the profiled one where there is a "
               "profile)", "text", per_case=True, when=_PLACED),
        Figure("profiled", "", "whether the profile's counters for this case were read",
               "flag", per_case=True, when=_PLACED),
        Figure("limiter_rules", "", "the limiter rules that fired, in table order", "list",
               per_case=True, when=_PLACED),
        Figure("first_try", "", "the first thing to try", "text", per_case=True,
               when=_PLACED),
        Figure("why", "", "why the time is suspect", "text", per_case=True,
               when="for a suspect case"),
    ))


def run(ctx: Context) -> dict[str, Any]:
    if ctx.device != "cuda":
        raise RungSkipped("no GPU: the roofline needs the GPU's measured ceilings, and CPU "
                          "wall-clock times under Triton's interpreter have none")
    bench = ctx.results.get("benchmark")
    if bench is None or not bench.ok:
        raise RungSkipped("needs the benchmark rung's times: climb benchmark too")
    ceilings, source, table = _ceilings(ctx)
    threshold = ctx.settings.roofline_threshold_pct
    profile = ctx.results.get("profile")
    profile_figures = profile.figures if profile is not None and profile.ok else None
    rows = case_rows(ctx, bench.figures, ceilings, threshold, profile_figures)
    figures = summarise(rows, threshold, source, table)
    if figures is None:
        raise RungSkipped("no bench case has both a time and work to place: check the "
                          "problem's flops() and bytes_moved()")
    if figures["verdict"] == "suspect":
        first = next(r for r in rows if r.get("verdict") == "suspect")
        raise RungFailed(
            "SuspectTime",
            f"bench case {first['case']} took {first['median_us']:.4g} us: {first['why']} "
            f"(the roofline allows no less than {first['roofline_us']:.4g} us)",
            "a version faster than the device allows is not a win: check that it does all "
            "the work on every call (no results cached across calls, no skipped elements); "
            "if it does, the problem's flops()/bytes_moved() overstate the work, or the "
            "ceilings are stale (`krung calibrate --force` measures them again)",
            figures=figures)
    return figures


def case_rows(ctx: Context, bench_figures: dict[str, Any], ceilings: Ceilings,
              threshold: float, profile_figures: Any = None) -> list[dict[str, Any]]:
    """A row for each bench case the benchmark rung timed: its place under these ceilings
    (the roofline rung's rows; the profile rung picks the case furthest from the roofline)."""
    tf32 = _allows_tf32(ctx.problem.tolerance)
    cases = {case_label(c): c for c in ctx.problem.bench_cases_for(ctx.device)}
    mix, no_mix_why, kernels = _kernels_of(ctx.results.get("artifacts"))
    no_profile_why = _no_profile_why(ctx.results.get("profile"))
    rows = []
    for bench_row in bench_figures.get("per_case") or []:
        case = cases.get(bench_row.get("case"))
        if case is None or not bench_row.get("median_us"):
            continue
        precision = roofline.precision_of(str(case.get("dtype", "float32")), tf32)
        compute = pipes.compute_ceiling(mix, precision, ceilings, no_mix_why)
        rows.append(case_figures(bench_row, precision, float(ctx.problem.flops(dict(case))),
                                 float(ctx.problem.bytes_moved(dict(case))), ceilings,
                                 threshold, profile_figures, compute=compute, kernel=kernels,
                                 no_profile_why=no_profile_why))
    return rows


def kept_ceilings(ctx: Context) -> Ceilings | None:
    """The device's ceilings if the store keeps a calibration for it (nothing is measured)."""
    entry = find(ctx.calibrations, key_of(ctx.env))
    return Ceilings.from_record(entry["record"]) if entry is not None else None


def case_figures(bench_row: dict[str, Any], precision: str, flops: float, moved: float,
                 ceilings: Ceilings, threshold: float, profile_figures: Any, *,
                 compute: ComputeCeiling | None = None, kernel: str | None = None,
                 no_profile_why: str | None = None) -> dict[str, Any]:
    """One bench case's row: its work, its place under the roofline (against `compute`, by
    default the dtype's peak), its time at the top clock, and its likely limiter."""
    from krung.judge.rungs.roofline import limiter  # the rules: not needed to read SPEC

    label = bench_row["case"]
    row: dict[str, Any] = {"case": label, "precision": precision, "flops": flops,
                           "bytes_moved": moved, "median_us": bench_row["median_us"]}
    if compute is None:
        compute = dtype_ceiling(precision, ceilings, "no SASS was given to choose by")
    try:
        point = roofline.place(flops, moved, bench_row["median_us"], ceilings, precision,
                               threshold, compute)
    except ValueError as exc:
        return {**row, "verdict": None, "limiter": f"not placed: {exc}"}
    at_top, how = at_max_clock(bench_row, point)
    if how and point.bound == "compute":  # the ceilings were measured near the top clock
        point = roofline.place(flops, moved, at_top, ceilings, precision, threshold, compute)
    signals = limiter.profile_signals(profile_figures, label)
    profiled = profile_figures.get("case") if isinstance(profile_figures, dict) else None
    found = limiter.likely_limiter(limiter.Facts(
        point, bench_row, signals, profiled, label,
        **({"no_profile_why": no_profile_why} if no_profile_why else {})))
    return {**row, **_point_figures(point), "median_us_at_max_clock": at_top,
            **({"clock_scaling": how} if how else {}),
            "kernel": signals.kernel or kernel, "profiled": signals.has_throughputs,
            **found.to_json(), **({"why": point.why_suspect} if point.why_suspect else {})}


def at_max_clock(bench_row: dict[str, Any], point: Point) -> tuple[float, str | None]:
    """The case's time at the GPU's top SM clock, and how it was scaled (None: as timed).
    Only the compute share of the roofline's time follows the clock (DRAM's bandwidth does
    not): time x (1 - share + share x timed / top)."""
    median = float(bench_row["median_us"])
    timed, top = bench_row.get("sm_mhz_timed"), bench_row.get("sm_max_mhz")
    share = point.compute_share
    if not isinstance(timed, (int, float)) or not isinstance(top, (int, float)) or \
            not 0 < timed < top or share <= 0:
        return median, None
    factor = 1 - share + share * timed / top
    return median * factor, (f"x{factor:.3g}: the compute share of the roofline time "
                             f"({share:.0%}) scaled by the clock, {timed:.0f} MHz timed of "
                             f"{top:.0f} MHz top")


def summarise(rows: list[dict[str, Any]], threshold: float, source: str,
              table: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rung's figures from its case rows; None when no case could be placed."""
    placed = [r for r in rows if r.get("verdict")]
    if not placed:
        return None
    worst = min(placed, key=lambda r: r["pct"])
    suspect = [r for r in placed if r["verdict"] == "suspect"]
    at = [r for r in placed if r["verdict"] == "at-roofline"]
    figures = {
        "verdict": "suspect" if suspect else ("at-roofline" if len(at) == len(placed)
                                              else "below"),
        "pct_of_roofline": roofline.geomean([r["pct"] for r in placed]),
        "at_roofline": f"{len(at)}/{len(placed)}",
        "threshold_pct": threshold,
        "worst_case": worst["case"],
        "limiter": (suspect[0] if suspect else worst)["limiter"],
        "compute_ceilings": _compute_ceilings(placed),
        "ceilings_from": source,
        "ceilings": table,
        "per_case": rows,
    }
    figures["next_step"] = next_step(figures)
    return figures


def _compute_ceilings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compute ceilings the cases were placed under, each once, with what chose it."""
    seen: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = (row.get("compute_ceiling"), row.get("ceiling_chosen_by"))
        seen.setdefault(key, {k: row.get(k) for k in (
            "compute_ceiling", "compute_label", "compute_per_s", "compute_bytes_per_s",
            "ceiling_chosen_by", "ceiling_assumed")} | {"cases": []})["cases"].append(row["case"])
    return list(seen.values())


def _ceilings(ctx: Context) -> tuple[Ceilings, str, list[dict[str, Any]]]:
    """The device's ceilings: kept in the store, or measured now and sent there to keep."""
    key = key_of(ctx.env)
    entry = find(ctx.calibrations, key)
    if entry is None:
        from krung.judge.rungs.roofline.ceilings import calibration_for

        ctx.progress("roofline", "calibrating the GPU's ceilings (once per device, driver and "
                                 "library versions)")
        try:
            entry = calibration_for(ctx.env, [], force=True)
        except RuntimeError as exc:  # torch's CUDA errors, or too little free memory
            raise RungSkipped(f"the GPU's ceilings could not be measured ({exc}); free the GPU "
                              "and run `krung calibrate`") from exc
        entry.pop("cached", None)
        source = adopt(entry, ctx.save_calibration)
        ctx.calibrations.append(entry)
    else:
        source = f"measured {entry['measured_at']} (kept in the store)"
    return (Ceilings.from_record(entry["record"]), source,
            ceilings_table(entry["record"], key["device_name"]))


def adopt(entry: dict[str, Any], save: Callable[[dict[str, Any]], None]) -> str:
    """Keep a calibration measured now (through `save`) unless its clocks were low or the GPU
    throttled while it ran: such ceilings serve this run only. Says where they came from."""
    warning = (entry["record"].get("clock") or {}).get("warning")
    if warning:
        return (f"measured now ({entry['measured_at']}), not kept: {warning}; the next run "
                "measures again (or `krung calibrate --force` on an idle GPU)")
    save(entry)
    return f"measured now ({entry['measured_at']})"


def ceilings_table(record: dict[str, Any], device_name: str) -> list[dict[str, Any]]:
    """The ceilings the roofline uses as figures (measured, or the datasheet's where a pipe
    could not be measured: `from` says which), for reports."""
    return [{k: row[k] for k in ("ceiling", "unit", "measured", "datasheet", "used", "from")}
            for row in beside_datasheet(record, device_name) if row["used"]]


def _point_figures(point: Point) -> dict[str, Any]:
    compute = point.compute
    return {
        "tflops": point.achieved_flops_per_s / 1e12, "gbps": point.achieved_bytes_per_s / 1e9,
        "intensity": point.intensity, "ridge": point.ridge, "bound": point.bound,
        "ceiling": point.ceiling, "ceiling_label": point.ceiling_label,
        "compute_ceiling": compute.name if compute else point.precision,
        "compute_label": compute.label if compute else f"the {point.precision} peak",
        "compute_per_s": compute.per_s if compute else None,
        "compute_bytes_per_s": compute.bytes_per_s if compute else None,
        "ceiling_chosen_by": compute.chosen_by if compute else "the dtype",
        "ceiling_assumed": compute.assumed if compute else True,
        "roofline_us": point.roofline_us, "pct": point.pct,
        "headroom": point.headroom, "verdict": point.verdict,
    }


def _kernels_of(artifacts: Any) -> tuple[dict[str, Any] | None, str, str | None]:
    """The version's instruction mix from the artifacts rung, why there is none when there
    is not, and its kernels' names for people."""
    if artifacts is None:
        return None, "the artifacts rung did not run, so no SASS says which pipes the " \
                     "kernels use", None
    figures = artifacts.figures if isinstance(artifacts.figures, dict) else {}
    names = list(dict.fromkeys(str(r.get("function") or r.get("kernel"))
                               for r in figures.get("per_kernel") or []
                               if isinstance(r, dict) and not r.get("error")))
    kernel = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "") \
        if names else None
    mix = pipes.version_mix(figures)
    if mix is not None:
        return mix, "", kernel
    if artifacts.status.value == "skipped":
        return None, f"the artifacts rung was skipped ({artifacts.reason})", kernel
    return None, "the artifacts rung found no SASS for the kernels", kernel


def _no_profile_why(profile: Any) -> str | None:
    """Why no case has the profile's counters, when the profile rung was asked for."""
    if profile is None or profile.ok:
        return None
    if profile.status.value == "skipped":
        return f"the profile rung was skipped ({profile.reason})"
    return f"the profile rung failed ({profile.error_type})"


def _allows_tf32(tolerance: Any) -> bool:
    """Whether the problem accepts TF32 results for float32 (its tolerance says "tf32")."""
    if tolerance == "tf32":
        return True
    return isinstance(tolerance, dict) and tolerance.get("float32") == "tf32"
