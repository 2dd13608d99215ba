"""benchmark: time the version and the reference on every bench case, the same way.

Per bench case: several input sets (different seeds; together more than the L2 holds, up to 8;
one where a set and its outputs reach 1 GiB), timed in two rounds that alternate version and
reference so drift hits both alike. The first round gives the worker new storage; the second writes new
values into that same storage. Before every timed call a few elements of its input set change
(outside the timed region; krung.worker.guard.InputChanges), so no two timed calls see the same
contents. After each round the last output of the timed calls for every input set is compared
with the reference's on that set as the call saw it, so a version that is right only outside
the timed loop, or that remembers inputs it has seen (by storage, or by some of their values),
fails here. The version is timed in its worker, the reference in the judge, with the same
protocol (krung.worker.timing). The GPU's clocks are read before and after; throttling is
reported with the figures. A time below what the GPU's datasheet peaks allow for the problem's
work is impossible, and fails the rung. Each case gets its own verdict beside the aggregate:
where the floor is known, how far above it the case ran (`floor_ratio`); everywhere, a case
whose speedup stands far above the other cases' (`outlier`: one case driven towards zero time
would carry the geometric mean) is flagged and named.

On a CPU (Triton's interpreter) the cases are the problem's `cpu_bench_cases`, or its
smallest bench case shrunk to fit the interpreter (krung.judge.problem.cpu_cases); then the
figures say so (`cases_reduced_for_cpu`: which case was timed instead of which).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import asdict, replace
from functools import partial
from typing import Any

from krung.judge import clock
from krung.judge.contract import check_conduct
from krung.judge.device import clock_state, clock_warning, floor_us
from krung.judge.ladder import Context, nbytes, poison_leaves
from krung.judge.problem import case_label
from krung.judge.problem.value_stress import structured
from krung.judge.rungs.correctness import ERROR_FIGURES
from krung.judge.rungs.spec import AGENT, HTML, TABLE, TABLES, Figure, RungSpec
from krung.protocol import messages, tree
from krung.protocol.errors import RungFailed
from krung.worker.guard import NAN_BYTE
from krung.worker.timing import Samples, TimingPlan, measure, summarise

_COMPILED = "with --vs-compiled (KRUNG_COMPILED_BASELINE=1)"
_GPU = "on a GPU"
_CUPTI = "where the GPU timer saw the call's kernels"
OUTLIER_RATIO = 8.0  # a case's speedup over the median of the others' that is flagged
SPEC = RungSpec(
    "benchmark", order=60, needs=("correctness",), exclusive_gpu=True,
    checks="every bench case timed, version and reference the same way (docs/timing.md): "
           "several input sets outgrowing the L2, two rounds alternating version and "
           "reference; a few input elements changed before every timed call and the "
           "timed calls' outputs checked on them; a time below what the GPU's "
           "datasheet peaks allow for the work fails (`ImpossibleTime`); on a CPU, the "
           "problem's cpu_bench_cases or its smallest bench case shrunk for the interpreter",
    per="bench case",
    figures=(
        Figure("timer", "", "how the times were taken: a GPU timer (cupti, cuda-event), or "
               "cpu-wall (wall-clock time on a CPU)", "text"),
        Figure("cases", "", "the bench cases timed", "count"),
        Figure("geomean_us", "us", "the geometric mean of the per-case medians"),
        Figure("speedup", "x", "the geometric mean of reference time / version time (>1 is "
               "faster)"),
        Figure("speedup_vs_compiled", "x", "the geometric mean of torch.compile(reference) "
               "time / version time", when=_COMPILED),
        Figure("compiled_warm_up_s", "s", "torch.compile's warm-up calls (its compiles), not "
               "timed", when=_COMPILED),
        Figure("compiled_error", "", "why torch.compile(reference) could not be timed", "text",
               when=_COMPILED),
        Figure("cases_reduced_for_cpu", "", "which smaller case was timed instead of which, "
               "and why", "text", when="on a CPU, when the bench cases are too big for the "
                                       "interpreter"),
        Figure("ranking_by", "", "GPU MODE's ranking rule over the bench cases: last, mean or "
               "geomean", "text", when="GPU MODE problems"),
        Figure("score_us", "us", "the ranking score: the rule over the per-case medians",
               when="GPU MODE problems"),
        Figure("l2_hints", "", "the version's L2 eviction-priority hints (static's `l2_hints`): "
               "lines they keep in L2 can outlive the flush between timed calls, so the times "
               "may include L2 hits a cold call would not have (docs/trust.md)", "list",
               shown=(HTML, AGENT), when="when the version's source has one"),
        Figure("clock_gaps", "", "the cases whose reported median is far below the judge's "
               "own wall time per call (`clock_gap`)", "text", when="when a case has one"),
        Figure("speedup_outliers", "", "the cases whose speedup is more than "
               f"{OUTLIER_RATIO:g} times the median of the other cases' (they carry the "
               "geometric mean: look at what the version does there)", "text",
               when="when a case stands out"),
        *(Figure(f.name, f.unit, f.meaning, f.kind, when="on TimedMismatch: the failing "
                 "output's comparison") for f in (*ERROR_FIGURES, Figure(
                     "elements", "", "the output's elements", "count"))),
        Figure("case", "", "the bench case", "text", per_case=True, required=True),
        Figure("median_us", "us", "the median of the version's times per call", per_case=True,
               required=True, shown=TABLES),
        Figure("p10_us", "us", "the 10th percentile of the version's times", per_case=True,
               shown=TABLES),
        Figure("p90_us", "us", "the 90th percentile of the version's times", per_case=True,
               shown=TABLES),
        Figure("cv", "", "the coefficient of variation of the version's times", per_case=True),
        Figure("ci_pct", "%", "the half-width of the median's confidence interval, % of the "
               "median", per_case=True, shown=TABLES),
        Figure("samples", "", "the version's timed calls", "count", per_case=True,
               shown=(TABLE,)),
        Figure("ref_median_us", "us", "the median of the reference's times, taken the same way",
               per_case=True, required=True, shown=TABLES),
        Figure("speedup", "x", "reference median / version median (>1 is faster)",
               per_case=True, required=True, shown=TABLES),
        Figure("timer", "", "how the version's times were taken", "text", per_case=True,
               shown=TABLES),
        Figure("host_median_us", "us", "the median time per call as the host saw it (launches "
               "included)", per_case=True, shown=(TABLE,), when=_CUPTI),
        Figure("kernels_per_call", "", "the kernels, copies and memsets one call launched",
               per_case=True, shown=(HTML,), when=_CUPTI),
        Figure("launch_bound", "", "the host's time is well above the device's: launches, not "
               "kernels, bound the call", "flag", per_case=True, shown=(HTML,), when=_CUPTI),
        Figure("sm_mhz_timed", "MHz", "the SM clock the samples ran at (from the timer's "
               "markers)", per_case=True, shown=TABLES, when=_GPU),
        Figure("compiled_median_us", "us", "the median of torch.compile(reference)'s times",
               per_case=True, shown=TABLES, when=_COMPILED),
        Figure("speedup_vs_compiled", "x", "torch.compile(reference) median / version median",
               per_case=True, shown=TABLES, when=_COMPILED),
        Figure("config", "", "the configs @triton.autotune chose for the case's shapes",
               "text", per_case=True, shown=TABLES, when="autotuned versions"),
        Figure("autotune", "", "the chosen configs, per kernel", "list", per_case=True,
               when="autotuned versions"),
        Figure("ref_timer", "", "how the reference's times were taken", "text", per_case=True),
        Figure("input_sets", "", "the input sets the calls rotate through (together more than "
               "the L2 holds, up to 8; alone where a set and its outputs reach 1 GiB)", "count",
               per_case=True),
        Figure("l2_flush_bytes", "B", "the buffer written to flush the L2 before each call",
               "count", per_case=True),
        Figure("persisting_l2_bytes", "B", "the L2 the version set aside for persisting lines "
               "(cudaLimitPersistingL2CacheSize); they were reset before each timed call, so "
               "nothing persisted between calls (docs/trust.md)", "count", per_case=True,
               when="when the version raised the limit (GPU)"),
        Figure("wall_s", "s", "the wall-clock time the version's timing took", per_case=True),
        Figure("value_stress", "", "the value stresses of the rounds' last input sets (their "
               "values moved off the generator's distribution, krung.judge.problem."
               "value_stress): times and outputs on other values than the generator's",
               "list", per_case=True, when="where KRUNG_VALUE_STRESS applies"),
        Figure("streams", "", "the streams the call's work ran on", "count", per_case=True,
               when="when it ran on several"),
        Figure("outputs_reused", "", "the calls' outputs shared storage across input sets (a "
               "CUDA graph's static output, as torch.compile's mode=\"reduce-overhead\" "
               "gives), so each call overwrote the last one's: each timed call's outputs were "
               "copied before the next call, outside its time, as the checked calls' are, and "
               "checked; a caller keeping two results must copy the first", "flag",
               per_case=True, when="when they did"),
        Figure("sm_mhz", "MHz", "the SM clock before and after the timing", "list",
               per_case=True, when=_GPU),
        Figure("sm_max_mhz", "MHz", "the GPU's top SM clock", per_case=True, when=_GPU),
        Figure("clock_warning", "", "the GPU throttled or ran at low clocks during the timing",
               "text", per_case=True, when="when it did"),
        Figure("power_capped", "", "the GPU hit its power cap during the timing", "flag",
               per_case=True, when="when it did"),
        Figure("floor_us", "us", "the least time the GPU's datasheet peaks allow for the "
               "case's work", per_case=True, when="on a GPU krung has a datasheet for"),
        Figure("floor_ratio", "x", "the version's median over floor_us (1 is the datasheet's "
               "limit; below it fails)", per_case=True, shown=TABLES,
               when="on a GPU krung has a datasheet for"),
        Figure("judge_us_per_call", "us", "the judge's own wall time of the version's timing "
               "requests (after the first round) per call the worker made (warm-up and "
               "timed): the reported times must fit in it (krung.judge.clock)", per_case=True),
        Figure("clock_gap", "", f"the judge's wall time per call is more than "
               f"{clock.GAP_RATIO:g} times the median plus {clock.GAP_US['cpu']:g} us "
               f"({clock.GAP_US['cuda']:g} us on a GPU): "
               "the reported times may not be the calls' (docs/trust.md)", "flag",
               per_case=True, shown=TABLES, when="when it is"),
        Figure("outlier", "", f"the case's speedup is more than {OUTLIER_RATIO:g} times the "
               "median of the other cases'", "flag", per_case=True, shown=TABLES,
               when="when it is"),
    ),
    notes="On ImpossibleTime the rung's figures are the failing case's row.")

ROUNDS = 2  # version, reference, version, reference
GPU_PLAN = TimingPlan(warmup_s=0.02, max_s=0.12, min_samples=10, max_samples=2000,
                      target_ci=0.003)
# Interpreted kernels are slow and their time says little: a few samples are enough.
CPU_PLAN = TimingPlan(warmup_s=0.0, max_s=0.15, min_samples=3, max_samples=100, target_ci=0.02)
MAX_INPUT_SETS = 8
LARGE_SET_BYTES = 1 << 30  # a set this large, with its outputs, is timed alone (input_set_count)
CHANGED_ELEMENTS = 4  # per input tensor, before every timed call
LAUNCH_BOUND_RATIO = 1.5  # host-visible over device time


def run(ctx: Context) -> dict[str, Any]:
    plan = CPU_PLAN if ctx.device == "cpu" else GPU_PLAN
    cases = ctx.problem.bench_cases_for(ctx.device)
    baseline = None
    if ctx.settings.compiled_baseline:
        baseline = CompiledBaseline(ctx.problem.reference)
    rows = []
    for index, case in enumerate(cases):
        ctx.progress("benchmark", f"case {index + 1}/{len(cases)} {case_label(case)}")
        rows.append(_bench_case(ctx, index, case, plan, baseline))
    figures: dict[str, Any] = {
        "timer": rows[0]["timer"] if rows else None,
        "cases": len(rows),
        "geomean_us": _geomean([r["median_us"] for r in rows]),
        "speedup": _geomean([r["speedup"] for r in rows if r["speedup"]]),
    }
    if baseline is not None:
        versus = _geomean([r["speedup_vs_compiled"] for r in rows
                           if r.get("speedup_vs_compiled")])
        if versus is not None and baseline.error is None:  # not over some of the cases only
            figures["speedup_vs_compiled"] = versus
        figures.update(baseline.figures())
    reduced = ctx.problem.cpu_reduction() if ctx.device == "cpu" else None
    if reduced:  # the bench cases are too big for the interpreter: a smaller one was timed
        figures["cases_reduced_for_cpu"] = (
            f"{reduced['from']} -> {reduced['to']} ({reduced['how']}; inputs and outputs "
            f"{reduced['bytes'] or '?'} B, the interpreter's budget {reduced['budget_bytes']} B)")
    if ctx.problem.ranking_by:  # GPU MODE ranks a version by one score over its bench cases
        figures["ranking_by"] = ctx.problem.ranking_by
        figures["score_us"] = ranking_score(ctx.problem.ranking_by,
                                            [r["median_us"] for r in rows])
    gaps = [f"{r['case']}: {r['median_us']:.3g} us reported, {r['judge_us_per_call']:.3g} us "
            "per call on the judge's clock" for r in rows if r.get("clock_gap")]
    if gaps:
        figures["clock_gaps"] = "; ".join(gaps)
    outliers = flag_outliers(rows)
    if outliers:
        figures["speedup_outliers"] = outliers
    static = ctx.results.get("static")
    if static is not None and static.figures.get("l2_hints"):
        figures["l2_hints"] = static.figures["l2_hints"]
    figures["per_case"] = rows
    return figures


def flag_outliers(rows: list[dict[str, Any]]) -> str | None:
    """Flag (`outlier`) each case whose speedup is more than OUTLIER_RATIO times the median
    of the other cases' speedups, and name them: one case driven towards zero time carries
    the geometric mean, so it is shown, not averaged away."""
    said = []
    for index, row in enumerate(rows):
        others = [r["speedup"] for n, r in enumerate(rows) if n != index and r.get("speedup")]
        if not row.get("speedup") or not others:
            continue
        typical = statistics.median(others)
        if row["speedup"] > OUTLIER_RATIO * typical:
            row["outlier"] = True
            said.append(f"{row['case']}: {row['speedup']:.3g}x against a median of "
                        f"{typical:.3g}x over the other cases")
    return "; ".join(said) or None


def ranking_score(rule: str, times_us: list[float]) -> float | None:
    """GPU MODE's ranking over the bench cases: the last one's time, their mean, or their
    geometric mean (krung's per-case figure is the median of its samples)."""
    if not times_us:
        return None
    if rule == "last":
        return times_us[-1]
    if rule == "mean":
        return sum(times_us) / len(times_us)
    return _geomean(times_us)


class CompiledBaseline:
    """torch.compile(reference) (inductor, default mode), timed beside the reference by the
    same protocol. Each bench case gets a fresh compile for its shapes (static, as the case
    would alone: no dynamic shapes carried over from earlier cases, no recompile limit), on a
    warm-up call outside the timing; a recompile during the timing would time compiling, so
    it is an error. What goes wrong is reported, and the rung goes on without the baseline."""

    def __init__(self, reference: Any):
        self.reference = reference
        self.error: str | None = None
        self.compile_s = 0.0

    def warm(self, inputs: tuple) -> Any:
        """The reference compiled for these inputs; None once the baseline has failed."""
        if self.error is not None:
            return None
        import torch

        start = time.perf_counter()
        try:
            torch._dynamo.reset()
            compiled = torch.compile(self.reference, dynamic=False)
            compiled(*inputs)
        except Exception as exc:  # inductor needs a C++ compiler, say
            self._fail(exc)
            return None
        finally:
            self.compile_s += time.perf_counter() - start
        return compiled

    def time(self, compiled: Any, sets: list, device: str, plan: TimingPlan) -> Samples | None:
        import torch

        try:
            with torch._dynamo.config.patch(error_on_recompile=True):
                return measure(partial(_call, compiled, sets), len(sets), device, plan)
        except Exception as exc:  # out of memory, a recompile, a failure inside the kernels
            self._fail(exc)
            return None

    def figures(self) -> dict[str, Any]:
        """Its figures for the rung: the warm-up (compile) time, and why it failed if it did."""
        figures: dict[str, Any] = {"compiled_warm_up_s": round(self.compile_s, 3)}
        if self.error is not None:
            figures["compiled_error"] = self.error
        return figures

    def _fail(self, exc: Exception) -> None:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        self.error = f"{type(exc).__name__}: {first}"


def _bench_case(ctx: Context, index: int, case: dict, plan: TimingPlan,
                baseline: CompiledBaseline | None = None) -> dict[str, Any]:
    label = case_label(case)
    what = f"timing bench case {label}"
    ctx.release_cache()
    first = ctx.make_inputs(case, ctx.seed_for("benchmark", index, 0, 0))
    count = _input_sets(ctx, first)

    before = clock_state() if ctx.device == "cuda" else None
    after = None
    mine: list[Samples] = []
    ref: list[Samples] = []
    compiled_samples: list[Samples] = []
    reference = ctx.problem.reference
    compiled = baseline.warm(first) if baseline is not None else None
    round_plan = replace(plan, max_s=plan.max_s / ROUNDS,
                         min_samples=max(3, plan.min_samples // ROUNDS))
    tuned: list[dict[str, Any]] = []
    reused = False  # the calls' outputs shared storage (the worker copied each)
    timed_stress: list[str] = []
    judge_s = 0.0  # the version's requests as the judge's clock saw them (krung.judge.clock)
    for round_index in range(ROUNDS):
        # Each round's sets are made when it starts, the last round's data freed first: at
        # KernelBench's declared sizes a set reaches 8 GiB, and two rounds' sets and outputs
        # at once ran the H200 out of memory with two problems on it.
        sets = expected = []
        reply = None  # the last round's timed outputs too
        sets = [first if round_index == n == 0 else
                ctx.make_inputs(case, ctx.seed_for("benchmark", index, round_index, n))
                for n in range(count)]
        first = None
        stress = _stress_last_set(ctx, sets, ROUNDS * index + round_index)
        if stress:
            timed_stress.append(stress)
        sent = [list(poison_leaves(s, ctx.problem.writable_leaves(s), NAN_BYTE)) for s in sets]
        changes = _changes(ctx, sets, ctx.seed_for("benchmark-changes", index, round_index))
        request = (messages.Time(plan=asdict(round_plan), inputs=sent, changes=changes)
                   if round_index == 0 else
                   messages.Time(plan=asdict(round_plan), refill=sent, changes=changes))
        expected = [ctx.expected(inputs) for inputs in sets]
        limit = 2 * sum(nbytes(e) for e in expected) + (1 << 20)
        asked = time.perf_counter()
        reply = ctx.ask(request, what, ctx.settings.bench_timeout_s, limit)
        wall_s = time.perf_counter() - asked
        check_conduct(reply, what, set())
        if changes:
            _apply_changes(sets, reply, changes, what)
        mine.append(clock.samples_of(reply["samples"], what))
        clock.check_batch(mine[-1], wall_s, round_plan, what)
        judge_s += wall_s if round_index else 0.0  # the first has transfers and autotuning
        if round_index == ROUNDS - 1 and ctx.device == "cuda":
            after = clock_state()  # right after the version's last round, not the reference's
        tuned = reply.get("autotune") or tuned  # configs chosen before the timed calls
        reused = reused or bool(reply.get("outputs_reused"))
        # The version's process stopped: nothing it left running competes with the reference.
        with ctx.candidate.paused():
            ref.append(measure(partial(_call, reference, sets), len(sets), ctx.device,
                               round_plan))
            if baseline is not None and compiled is not None:
                timed = baseline.time(compiled, sets, ctx.device, round_plan)
                if timed is None:  # failed: none of this case's figures, nor later ones
                    compiled, compiled_samples = None, []
                else:
                    compiled_samples.append(timed)
        if changes:  # the reference on each set as its last timed call saw it
            expected = [ctx.expected(inputs) for inputs in sets]
        _check_timed_outputs(ctx, reply, sets, expected, f"{label}, round {round_index + 1}")

    device_us = [t for s in mine for t in s.device_us]
    host_us = [t for s in mine for t in s.host_us]
    stats = summarise(device_us)
    ref_stats = summarise([t for s in ref for t in s.device_us])
    row: dict[str, Any] = {
        "case": label,
        "median_us": stats["median_us"], "p10_us": stats["p10_us"], "p90_us": stats["p90_us"],
        "cv": stats["cv"], "ci_pct": _ci_pct(stats), "samples": stats["samples"],
        "ref_median_us": ref_stats["median_us"],
        "speedup": ref_stats["median_us"] / stats["median_us"] if stats["median_us"] > 0 else None,
        "timer": mine[0].mode, "ref_timer": ref[0].mode,
        "input_sets": count, "l2_flush_bytes": mine[0].l2_flush_bytes,
        "wall_s": round(sum(s.wall_s for s in mine), 3),
        **({"value_stress": timed_stress} if timed_stress else {}),
        **clock.gap(mine[1:], judge_s, stats["median_us"], ctx.device),
    }
    if reused:
        row["outputs_reused"] = True
    persisting = max(s.persisting_l2_bytes for s in mine)
    if persisting:  # reset before every timed call (krung.worker.l2): said, not rejected
        row["persisting_l2_bytes"] = persisting
    if compiled_samples:
        compiled_us = summarise([t for s in compiled_samples for t in s.device_us])["median_us"]
        row["compiled_median_us"] = compiled_us
        row["speedup_vs_compiled"] = (compiled_us / stats["median_us"]
                                      if stats["median_us"] > 0 else None)
    if tuned:  # @triton.autotune: what it chose for this case's shapes
        row["config"] = "; ".join(f"{t['kernel']}: {t['label']}" for t in tuned)
        row["autotune"] = tuned
    if host_us:
        host = summarise(host_us)["median_us"]
        row["host_median_us"] = host
        row["kernels_per_call"] = round(sum(s.kernels_per_call for s in mine) / len(mine), 2)
        row["launch_bound"] = host > LAUNCH_BOUND_RATIO * stats["median_us"] + 2.0
        if max(s.streams for s in mine) > 1:  # CUPTI saw the call's work on several streams
            row["streams"] = max(s.streams for s in mine)
    clocks = [s.sm_mhz for s in mine if s.sm_mhz]
    if clocks:  # the clock the version's samples ran at, from the timer's markers
        row["sm_mhz_timed"] = round(statistics.median(clocks))
    if after:
        row["sm_mhz"] = [before["sm_mhz"] if before else None, after["sm_mhz"]]
        row["sm_max_mhz"] = after["sm_max_mhz"]
        warning = clock_warning(before, after)
        if warning:
            row["clock_warning"] = warning
        if after.get("power_capped"):
            row["power_capped"] = True
    if ctx.device == "cuda":
        _check_possible(ctx, case, row)
    return row


def _stress_last_set(ctx: Context, sets: list, turn: int) -> str | None:
    """The round's last input set with its values moved off the generator's distribution
    (a value stress in turn, krung.judge.problem.value_stress), where one applies and the
    reference stays meaningful on it: the version's speed and outputs on other values than
    the generator's. The stress's name, or None where the set stayed as drawn."""
    from krung.judge.rungs.correctness import stressed_inputs, value_stresses

    stresses = value_stresses(ctx)
    first = turn % max(len(stresses), 1)
    for stress in stresses[first:] + stresses[:first]:
        moved, _, why = stressed_inputs(ctx, sets[-1], stress,
                                        ctx.seed_for("benchmark-stress", turn))
        if not why:  # else the next stress in turn; none: the set as drawn
            sets[-1] = moved
            return stress.name
    return None


def _call(fn: Any, sets: list, i: int) -> Any:
    return fn(*sets[i])


def _check_possible(ctx: Context, case: dict, row: dict[str, Any]) -> None:
    floor = floor_us(ctx.env.get("device_name", ""), ctx.problem.flops(dict(case)),
                     ctx.problem.bytes_moved(dict(case)))
    if floor is None:
        return
    row["floor_us"] = floor
    row["floor_ratio"] = round(row["median_us"] / floor, 3) if floor > 0 else None
    if row["median_us"] < floor:
        raise RungFailed(
            "ImpossibleTime",
            f"bench case {row['case']} took {row['median_us']:.2f} us, less than the "
            f"{floor:.2f} us the GPU's datasheet peaks allow for its work",
            "either the version skips work (cached or partial results the checks missed) or "
            "the problem's flops()/bytes_moved() overstate the work", figures=row)


def _changes(ctx: Context, sets: list, seed: int) -> dict[str, Any] | None:
    """What the worker changes before every timed call: CHANGED_ELEMENTS elements of each
    floating-point tensor of a set (float16 and wider) that is no output buffer (none for an
    in-place problem, or one whose inputs' structure forbids: `change_timed_inputs = False`).
    Everywhere unless KRUNG_TIMED_INPUT_CHANGES says cpu or off: on a GPU a marker of its
    own in the CUPTI records keeps that work out of the calls' time (measured on the H200:
    tests/test_timing.py::test_work_before_each_call_is_outside_its_time)."""
    mode = ctx.settings.timed_input_changes
    if mode == "off" or (mode == "cpu" and ctx.device != "cpu"):
        return None
    if ctx.problem.inplace or not ctx.problem.change_timed_inputs:
        return None
    # float8 and float4 tensors stay as drawn: torch has no arithmetic on them to choose
    # and move their values with.
    leaves = [[n for n, leaf in enumerate(tree.leaves(s)) if leaf.is_floating_point()
               and leaf.element_size() > 1 and leaf.numel() > 1
               and n not in ctx.problem.writable_leaves(s) and not structured(leaf)]
              for s in sets]
    if not any(leaves):
        return None
    return {"leaves": leaves, "elements": CHANGED_ELEMENTS, "seed": seed}


def _apply_changes(sets: list, reply: dict[str, Any], changes: dict[str, Any],
                   what: str) -> None:
    """Apply the last change the worker made to each input set, in place: a round's sets
    serve only its timings and checks after this, and a copy would double what the judge
    holds (a 16 GiB input at KernelBench's declared sizes: 45_Average_Pooling_2D ran out of
    an 80 GB GPU's memory there)."""
    reported = reply.get("changed") or []
    for inputs, chosen, changed in itertools.zip_longest(sets, changes["leaves"], reported):
        leaves = tree.leaves(inputs)
        if changed is None or sorted(c["leaf"] for c in changed) != sorted(chosen) or any(
                c["positions"].numel() != changes["elements"]
                or int(c["positions"].max()) >= leaves[c["leaf"]].numel()
                or int(c["positions"].min()) < 0 for c in changed):
            raise RungFailed("Tampering", f"the worker did not report the changes of the timed "
                             f"calls' inputs it was asked to make (in {what})",
                             "a version must not interfere with krung's worker")
        for c in changed:
            leaf = leaves[c["leaf"]]
            where = tree.unravel(c["positions"].to(leaf.device), leaf.shape)
            leaf.index_put_(where, c["values"].to(leaf.device, leaf.dtype))


def _input_sets(ctx: Context, first: tuple) -> int:
    set_bytes, outputs = nbytes(first), 0
    if ctx.device != "cpu" and set_bytes < LARGE_SET_BYTES:  # small inputs, a large output?
        outputs = nbytes(ctx.expected(first))
    return input_set_count(set_bytes, ctx.env.get("l2_bytes") or 0, outputs)


def input_set_count(set_bytes: int, l2_bytes: int, output_bytes: int = 0) -> int:
    """Enough input sets that together they outgrow the L2 (at least two, at most eight);
    one where a set and its outputs reach LARGE_SET_BYTES: each set's last outputs are held
    in the worker and the judge, so more sets would multiply what they hold at declared sizes
    (KernelBench's 6 GiB inputs, or a matmul's 4 GiB output from 16 MiB of inputs, seven sets
    of them, ran an 80 GB GPU out of memory), and every timed call already sees other
    contents (InputChanges) in storage far past the L2."""
    if set_bytes + output_bytes >= LARGE_SET_BYTES:
        return 1
    if not l2_bytes or set_bytes >= l2_bytes:
        return 2
    return min(MAX_INPUT_SETS, max(2, math.ceil(2 * l2_bytes / max(set_bytes, 1))))


def _check_timed_outputs(ctx: Context, reply: dict[str, Any], sets: list, expected: list,
                         label: str) -> None:
    for set_index, (outputs, specs, inputs, want) in enumerate(
            zip(reply["outputs"], reply["specs"], sets, expected, strict=True)):
        what = f"the timed calls of bench case {label}, input set {set_index + 1}"
        ctx.check_contract({"specs": specs, "tuple": reply["tuple"]}, want, what)
        verdict = ctx.judge(inputs, outputs, want, reply["tuple"])
        if not verdict.passed:
            comparison = verdict.comparison
            raise RungFailed(
                "TimedMismatch", f"{what}: {verdict.reason}",
                "the outputs of the timed calls are wrong though the checked calls were "
                "right: look for state kept between calls (results cached by input storage "
                "or by some of the inputs' values: a few elements change before every timed "
                "call; buffers reused across calls) or size-dependent code paths at bench "
                "sizes",
                figures=comparison.figures if comparison else {})


def _ci_pct(stats: dict[str, float]) -> float:
    middle = stats["median_us"]
    return 100 * (stats["ci_high_us"] - stats["ci_low_us"]) / (2 * middle) if middle else 0.0


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
