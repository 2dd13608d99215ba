"""correctness: every test case, with several fresh seeds each, against the reference.

Inputs are drawn fresh for every (case, seed) from the evaluation's secret seed, so no two
evaluations see the same data; besides the declared cases, a few unseen ones (awkward
neighbours of declared sizes, krung.judge.problem.unseen) run too, and each value stress once
on a listed case: the generator's draw with its values moved (scaled, ramped, sorted, tied,
skewed indices; krung.judge.problem.value_stress), so a version right only on the
generator's values fails. Every call is a checked call
(krung.judge.contract): poisoned output memory, inputs unchanged afterwards, no tampering, and on
each case's first seed no operator the problem forbids. Every call reports whether it
launched a kernel of the version's own (`delegated` when one did not: krung.judge.delegation),
which fails the rung where the problem's policy asks for one. Each output is compared in float64
under the per-dtype policy (krung.judge.tolerance, overridable by the problem), and by the
problem's own check where it has one (krung.judge.verdict). A failing case stops its remaining
seeds but not the other cases, so the report shows every case that fails.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from krung.judge.delegation import Delegation, source_names, traced_reference
from krung.judge.ladder import Context
from krung.judge.problem import case_label, case_size
from krung.judge.problem.cpu_budget import FLOOR, CallCost, CostModel, CpuBudget, shrink
from krung.judge.problem.unseen import narrowed, unseen_pairs
from krung.judge.problem.value_stress import STRESSES, Stress, meaningless, rounded_apart, stressed
from krung.judge.rungs.spec import AGENT, HTML, TABLE, TABLES, Figure, RungSpec
from krung.protocol.errors import RungFailed
from krung.protocol.settings import Settings

if TYPE_CHECKING:  # torch comes with them, and only where outputs are compared
    from krung.judge.metrics import Comparison
    from krung.judge.verdict import Verdict

# The figures of one comparison of an output with the reference's (krung.judge.metrics), in
# float64; the rung reports the worst over seeds and outputs, per case and over the cases.
ERROR_FIGURES = (
    Figure("max_abs_err", "", "the largest |out - ref|", shown=TABLES),
    Figure("max_rel_err", "", "the largest |out - ref| / |ref|, denominators clamped below "
           "1e-3 x RMS(reference) so near-zero references do not dominate it", shown=TABLES),
    Figure("mse", "", "the mean squared error"),
    Figure("rmse", "", "the root of the mean squared error"),
    Figure("psnr_db", "dB", "the peak signal-to-noise ratio; null when the outputs equal the "
           "reference", shown=(TABLE,)),
    Figure("cossim", "", "the cosine similarity of output and reference", shown=(TABLE,)),
    Figure("mismatches", "", "elements out of tolerance", "count", shown=TABLES),
    Figure("nonfinite", "", "NaN or Inf elements where the reference is finite", "count"),
    Figure("atol", "", "the absolute tolerance elements were held to: the policy's atol, "
           "times the reference's RMS where that is below 1"),
)
_SUMMARY_ERRORS = ("max_abs_err", "max_rel_err", "mse", "rmse", "psnr_db", "cossim")

SPEC = RungSpec(
    "correctness", order=40, needs=("run",),
    checks=f"every test case x {Settings.seeds} seeds (`KRUNG_SEEDS`), plus 1-2 unseen cases (awkward "
           "neighbours of declared sizes, new every evaluation), each value stress once on a "
           "listed case (its values moved off the generator's distribution; on a CPU, "
           "`KRUNG_VALUE_STRESS`), fresh inputs each time, "
           "checked calls (poisoned output memory, inputs unchanged, no tampering, no "
           "forbidden operator, a kernel of the version's own where the policy asks for one), "
           "outputs compared in float64 under the per-dtype tolerance, "
           "and by the problem's own check where it has one",
    summary_title="error figures",
    figures=(
        Figure("cases", "", "the cases checked: declared and unseen (and on a CPU each bench "
               "case's shape, once)", "count", shown=(HTML,)),
        Figure("seeds", "", "seeds per case", "count"),
        Figure("passed", "", "the cases that passed", "count", shown=(HTML,)),
        *(replace(f, meaning=f"{f.meaning}: the worst over the cases", shown=(HTML,))
          for f in ERROR_FIGURES if f.name in _SUMMARY_ERRORS),
        Figure("worst_case", "", "the case with the largest max_abs_err", "text", shown=(HTML,)),
        Figure("unseen_cases", "", "the unseen cases among them", "count", shown=(HTML,)),
        Figure("unseen_narrowed", "", "unseen cases that move only the sizes the problem "
               "allows (moving them all made its reference or input generator raise): the "
               "case, the sizes kept as declared, and the error", "text",
               when="when there are some"),
        Figure("unseen_skipped", "", "unseen cases the problem itself cannot make inputs or a "
               "reference output for, and why", "text", when="when there are some"),
        Figure("value_stress", "", "the value stresses checked, each on one listed case: "
               "its values moved off the generator's distribution (scaled, ramped, sorted, "
               "tied, skewed indices; krung.judge.problem.value_stress, KRUNG_VALUE_STRESS)",
               "list", shown=(HTML, AGENT), when="when some ran"),
        Figure("value_stress_skipped", "", "value stresses that could not decide anything: "
               "the reference raised, gave NaN/Inf, returned integers whose ties it may "
               "break either way, or failed the problem's own check", "text",
               shown=(HTML, AGENT),
               when="when there are some"),
        Figure("cpu_budget_s", "s", "the worker's CPU time the rung aims to spend on the "
               "version's calls (KRUNG_CPU_CHECK_BUDGET); cases are shrunk to fit, never "
               "below a few programs' work (krung.judge.problem.cpu_budget)", when="on a CPU"),
        Figure("cpu_spent_s", "s", "the worker's CPU time over the calls, less its first",
               when="on a CPU"),
        Figure("cpu_cost", "", "the cost per call learned on the way: call_s + per_outer_s x "
               "the outer sizes' product + per_size_s x the sizes' product", "map",
               when="on a CPU"),
        Figure("cases_shrunk", "", "cases checked smaller than declared: `declared -> "
               "checked`; sizes keep Triton's class of them and the innermost its power of "
               "two where that fits; the innermost size and the sizes' product stay at "
               f"least {FLOOR} (or as declared)", "text", when="on a CPU, when some were"),
        Figure("bench_paths_unchecked", "", "bench cases whose shape no affordable checked "
               "case took (each bench case is checked once at its shape's smallest form "
               "that keeps the innermost size's power of two): the case and the cost",
               "text", shown=(HTML, AGENT), when="on a CPU, when there are some"),
        Figure("delegated", "", "some checked call launched no kernel of the version's own "
               "(only torch's operators; krung.judge.delegation), or handed its work to a "
               "library (`library_work`): true for a plain torch version", "flag",
               shown=(HTML,)),
        Figure("library_work", "", "work the checked calls handed to a library beside "
               "torch's operators and the version's kernels: tensors handed to numpy, BLAS "
               "(cuBLAS, MKL, ...) symbols resolved through ctypes (krung.worker."
               "library_calls; on a CPU)", "list", shown=(HTML, AGENT), when="when some call did"),
        Figure("own_kernels", "", "the kernels of the version's own its checked calls "
               "launched (Triton's by name; on a GPU also every kernel CUPTI saw that the "
               "reference does not launch and torch does not own)", "list", shown=(HTML,)),
        Figure("own_share", "%", "the least share of a traced call's device time the "
               "version's own kernels took (CUPTI's census; under require_own_kernel at "
               "least half, krung.judge.delegation)", shown=(HTML, AGENT),
               when="on a GPU, where the version launched kernels of its own"),
        Figure("delegation_unknown", "", "why `delegated` could not be decided on some cases "
               "(a GPU without the kernel census: KRUNG_KERNEL_CENSUS=0, as on krung's "
               "second try after its own crash, or CUPTI unable to start)", "text",
               when="when some case went undecided"),
        Figure("reference_ops", "", "the reference's torch operators (less allocation and "
               "views) the version's traced calls ran too: what it delegated", "list",
               when="where the policy traces operators (forbid_ops, require_own_kernel)",
               shown=(HTML,)),
        Figure("threads_started", "", "threads the version started and left running", "count",
               when="when it left some"),
        Figure("swallowed_errors", "", "errors out of the version's own kernels (a Triton "
               "compile or launch error) that it caught itself during the checked calls: "
               "`N (first: ...)`; with a forbidden operator after it, the run fails "
               "(`ForbiddenOp` names the error)", "text", shown=(HTML, AGENT),
               when="when it caught some"),
        Figure("kernels_never_launched", "", "the Triton kernels the version's module defines "
               "that no checked call launched (ghost kernels)", "text", shown=(HTML, AGENT),
               when="when there are some"),
        Figure("kernels_launched", "", "launches of each Triton kernel the version's module "
               "defines, over the checked calls", "map", when="Triton versions"),
        Figure("failed_cases", "", "the cases that failed", "list", when="on failure"),
        Figure("first_mismatch", "", "the index of the first element out of tolerance in the "
               "first failing output", "list", when="on failure"),
        Figure("mismatch_region", "", "where the mismatches are, per dimension", "text",
               when="on failure"),
        Figure("reference_nondeterministic", "", "the reference itself gives other bits on "
               "the same inputs: no version can pass", "flag",
               when="on NondeterministicReference"),
        Figure("reference_spread", "", "per output, how far two runs of the reference on one "
               "failing call's inputs were apart, over the output's largest magnitude: "
               "rounding (a nondeterministic library algorithm), so from then on each "
               "output's atol grew by twice that at its scale (krung.judge.spread)", "list",
               when="where the reference disagrees with itself by rounding only"),
        Figure("case", "", "the case: `size=value,...,dtype=name`, `(unseen)` for an unseen "
               "one", "text", per_case=True, required=True),
        Figure("passed", "", "whether every seed of the case passed", "flag", per_case=True,
               required=True, shown=TABLES),
        Figure("seeds", "", "the seeds that ran (a failing seed stops the case)", "count",
               per_case=True, shown=TABLES),
        Figure("stress", "", "the value stress the case's inputs had (one seed)", "text",
               per_case=True, when="value-stress cases"),
        Figure("delegated", "", "a call of the case launched no kernel of the version's own",
               "flag", per_case=True, required=True, shown=TABLES),
        Figure("seconds", "s", "the case's wall time in the judge: inputs, reference, calls "
               "and comparisons over its seeds", per_case=True),
        *(replace(f, per_case=True, meaning=f"{f.meaning}: the worst over the case's "
                  "seeds and outputs") for f in ERROR_FIGURES),
        Figure("check", "", "what the problem's own check said", "text", per_case=True,
               when="problems with a check of their own"),
    ),
    notes="An element passes when `|out - ref| <= atol + rtol * |ref|` under the per-dtype "
          "policy (krung/judge/tolerance.py: float32 1e-4; float16 and bfloat16 1e-2; float8 "
          "wider; integers exact), overridable by the problem; atol is scaled by the "
          "reference's RMS where that is below 1, so zeros or a constant cannot pass on "
          "small-magnitude outputs (docs/trust.md); reduced precisions must also "
          "reach a minimum PSNR and cosine similarity, and NaN or Inf where the reference is "
          "finite never passes.")


def run(ctx: Context) -> dict[str, Any]:
    declared = ctx.problem.test_cases
    unseen, skipped, narrowings = _usable(ctx, unseen_pairs(declared, ctx.seed_for("unseen"),
                                                            ctx.problem.derive_case))
    cases = declared + unseen
    kinds = ["listed"] * len(declared) + ["unseen"] * len(unseen)
    budget = _budget(ctx)
    if budget is not None:  # the bench cases' shapes, at a size this machine affords
        bench = [c for c in ctx.problem.bench_cases if c not in cases]
        cases, kinds = cases + bench, kinds + ["bench"] * len(bench)
    # Each value stress on one listed case, in turn: the smallest first of those with room for
    # a prefix and a tail (krung.judge.problem.value_stress), else the largest.
    stresses = value_stresses(ctx)
    roomy = sorted((c for c in declared if case_size(c) >= STRESS_MIN_SIZE), key=case_size)
    roomy = roomy or sorted(declared, key=case_size)[-1:]
    main = len(cases)  # the cases before the stresses
    stress_of: list[Stress | None] = [None] * main + list(stresses)
    cases += [roomy[n % len(roomy)] for n in range(len(stresses))]
    kinds += ["stress"] * len(stresses)
    stress_run: list[str] = []
    stress_skipped: list[str] = []
    seeds = ctx.settings.seeds
    rows: list[dict[str, Any]] = []
    threads = 0
    delegation = Delegation(named=source_names(ctx.solution.source),
                            library_kernels=ctx.settings.library_kernels)
    conduct = KernelConduct()
    failures: list[tuple[str, int, Verdict]] = []
    worst: tuple[float, str, Comparison] | None = None
    # Value stresses last: on a CPU they take what the budget leaves (cpu_budget.fit).
    order = ((budget.order(cases[:main]) if budget else list(range(main)))
             + list(range(main, len(cases))))
    for done, index in enumerate(order):
        case, kind, stress = cases[index], kinds[index], stress_of[index]
        case_seeds = seeds if kind in ("listed", "unseen") else 1  # a path or values, once
        if budget is not None:
            left = (len(cases) if stress else main) - done
            case = budget.fit(case, case_seeds, left, extra=stress is not None)
            if case is None:  # a bench shape not even its smallest form affords
                continue
        label = case_label(case) + _origin(cases[index], case, kind, stress)
        ctx.progress("correctness", f"case {done + 1}/{len(cases)} {label}")
        row: dict[str, Any] = {"case": label, "seeds": 0, "passed": True, "delegated": False,
                               "index": index}
        started = time.perf_counter()
        for rep in range(case_seeds):
            # The last call's data dropped before the next is drawn: at declared sizes its
            # inputs, reference, outputs and inputs after (GiB each) would be held beside it.
            inputs = expected = reply = verdict = None
            if rep == 0:  # another case's sizes cannot reuse the last case's cached blocks
                ctx.release_cache()
            inputs = ctx.make_inputs(case, ctx.seed_for("correctness", index, rep))
            reference_ops = None
            if stress is not None:  # the generator's draw, its values moved
                inputs, expected, why = stressed_inputs(ctx, inputs, stress,
                                                        ctx.seed_for("stress", index))
                if why:  # said, unless the stress has nothing to change in this problem
                    if why != NOTHING_TO_STRESS:
                        stress_skipped.append(f"{stress.name} ({case_label(case)}): {why}")
                    break
                stress_run.append(f"{stress.name} ({case_label(case)})")
                row["stress"] = stress.name
            elif rep == 0:  # traced: the reference's operators and kernels too
                expected, reference_ops, kernels = traced_reference(ctx, inputs)
                if kernels is not None:
                    delegation.reference_kernels = (delegation.reference_kernels
                                                    or set()) | kernels
            else:
                expected = ctx.expected(inputs)
            what = f"case {label}, seed #{rep}"
            # the worker's CPU time over the call, on a CPU
            cost = CallCost(ctx.candidate.pid) if budget is not None else None
            reply = ctx.checked_call(inputs, expected, what, trace=rep == 0 and not stress)
            if budget is not None and cost is not None:
                budget.note(case, cost.seconds(), first=done == rep == 0)
            threads = max(threads, reply.get("threads_started", 0))
            # On a GPU only the traced call names the device's kernels (CUDA C++ ones too):
            # the others' Triton launches alone cannot tell a delegated call.
            decides = (rep == 0 and not stress) or ctx.device == "cpu"
            census = ctx.device == "cpu" or reply.get("device_kernels") is not None
            if decides:
                if delegation.note(reply, label, reference_ops, census):
                    row["delegated"] = True
                # own kernels beside the work (delegation.thin) fail the policy too
                if ctx.problem.require_own_kernel and (row["delegated"] or
                                                       label in delegation.thin):
                    raise delegation.failure(label, delegation.figures(ctx.traces_ops))
            conduct.add(reply)
            row["seeds"] += 1
            verdict = ctx.judge(inputs, reply["outputs"], expected, reply.get("tuple", False))
            for result in verdict.comparisons:
                _merge(row, result.figures)
                score = result.figures.get("max_abs_err", 0.0)
                if worst is None or score > worst[0]:
                    worst = (score, label, result)
            if not verdict.passed:
                row["passed"] = False
                if verdict.check_message:
                    row["check"] = verdict.check_message
                failures.append((label, rep, verdict, case, index))
                break
        if row["seeds"]:  # a stress that did not apply is said below, not a row
            row["seconds"] = round(time.perf_counter() - started, 4)
            rows.append(row)
    rows = [{k: v for k, v in r.items() if k != "index"}
            for r in sorted(rows, key=lambda r: r["index"])]
    figures = _summary(rows, seeds, worst)
    figures["unseen_cases"] = len(unseen)
    if budget is not None:
        figures.update(budget.figures())
    figures.update(delegation.figures(ctx.traces_ops))
    if skipped:  # the problem's own limits, said in the run rather than dropped
        figures["unseen_skipped"] = "; ".join(skipped)
    if narrowings:
        figures["unseen_narrowed"] = "; ".join(narrowings)
    if stress_run:
        figures["value_stress"] = stress_run
    if stress_skipped:
        figures["value_stress_skipped"] = "; ".join(stress_skipped)
    if threads:  # not a failure by itself, but work may be hiding there
        figures["threads_started"] = threads
    figures.update(conduct.figures())
    if ctx.reference_spread:
        figures["reference_spread"] = ctx.reference_spread
    if failures:
        # The failed call's data dropped and its blocks handed back before the reference
        # runs twice more on fresh inputs (at declared sizes, four copies of an input each)
        inputs = expected = reply = verdict = None
        ctx.release_cache()
        nondeterministic = _nondeterminism(ctx, failures)
        rounding = None
        if ctx.reference_spread and "reference_spread" not in figures:
            # seen only now (the version's errors were past it): the counts above include
            # elements as far apart as the reference's own two runs, which are no bug
            figures["reference_spread"] = ctx.reference_spread
            rounding = (f"the reference itself differs by rounding, up to "
                        f"{max(ctx.reference_spread):.3g} of its largest magnitude: "
                        "mismatches within twice that are its rounding, not the version's bug")
        raise _mismatch(failures, rows, figures, nondeterministic, rounding)
    return figures


def first_case(ctx: Context) -> tuple[dict, str]:
    """The case the compile and run rungs call, and its label: the first test case; on a CPU
    with a check budget, the smallest form of it that keeps the block it sets where its
    cost before any call is known (the prior's) is past the budget: a KernelBench case
    declared at 4096x393216 kept the interpreter past the compile rung's 180 s, a version
    told to look for an endless loop before any check ran. Correctness checks the case as
    its budget allows, as ever."""
    case = ctx.problem.test_cases[0]
    if _budget(ctx) is None:
        return case, case_label(case)
    model = CostModel()
    smaller = shrink(case, lambda c: model.predict(c) <= ctx.settings.cpu_check_budget_s,
                     keep_block=True)
    if smaller == case or unusable(ctx, smaller) is not None:
        return case, case_label(case)
    return smaller, f"{case_label(smaller)} (shrunk from {case_label(case)})"


def _budget(ctx: Context) -> CpuBudget | None:
    """On a CPU, the cases fitted to the time budget (krung.judge.problem.cpu_budget)."""
    if ctx.device != "cpu" or ctx.settings.cpu_check_budget_s <= 0:
        return None
    return CpuBudget(ctx.settings.cpu_check_budget_s, lambda c: unusable(ctx, c) is None)


NOTHING_TO_STRESS = "changes none of the inputs"
STRESS_MIN_SIZE = 1024  # a case's size product below which a ramp has no prefix and tail


def value_stresses(ctx: Context) -> tuple[Stress, ...]:
    """The value stresses this evaluation runs: all of them where KRUNG_VALUE_STRESS allows
    on this device and the problem does not opt out (`value_stress = False`)."""
    mode = ctx.settings.value_stress
    if mode == "off" or (mode == "cpu" and ctx.device != "cpu"):
        return ()
    if not ctx.problem.value_stress or not ctx.problem.test_cases:
        return ()
    return STRESSES


def stressed_inputs(ctx: Context, inputs: tuple, stress: Stress, seed: int
                    ) -> tuple[tuple, list, str | None]:
    """The inputs with `stress` applied and the reference's outputs on them, or why they
    cannot decide anything (the correctness rung's stressed cases, the benchmark's stressed
    input sets)."""
    try:
        moved = stressed(inputs, stress, ctx.problem.writable_leaves(inputs), seed)
    except Exception as exc:  # inputs of a kind the stress cannot move: krung's limit
        return inputs, [], f"could not be applied to these inputs: {_said(exc)}"
    if moved is None:
        return inputs, [], NOTHING_TO_STRESS
    moved = tuple(moved)
    try:
        expected = ctx.expected(moved)
    except Exception as exc:  # the problem's limits, not the version's fault
        return inputs, [], f"the reference raised {_said(exc)}"
    return moved, expected, _undecided(ctx, stress, moved, expected, inputs)


def _undecided(ctx: Context, stress: Stress, inputs: tuple, expected: list,
               drawn: tuple) -> str | None:
    """Why the reference's outputs on stressed inputs cannot decide a version (None: they
    can): NaN/Inf or tied indices (value_stress.meaningless), the problem's own check
    rejecting the reference's own outputs (a Cholesky factor of a matrix that ties made
    indefinite), or a tolerance that covers rounding on the generator's values (`drawn`)
    and not on these (value_stress.rounded_apart)."""
    from krung.judge.verdict import judge_outputs

    why = meaningless(stress, expected)
    if why:
        return why
    if ctx.problem.check is not None:
        verdict = judge_outputs(ctx.problem, inputs, expected, expected, len(expected) > 1,
                                ctx.device)
        if not verdict.passed:
            return (f"the problem's own check rejects the reference's outputs on these values "
                    f"({verdict.reason})")
    moved = _rounding_past_tolerance(ctx, inputs, expected)
    # Where rounding breaks the tolerance on the generator's values too, the problem wants
    # exact outputs (a sort, a copy): honest code does not round there, and the stress is fair.
    if moved and not _rounding_past_tolerance(ctx, drawn, ctx.expected(drawn)):
        return (f"the problem's tolerance covers rounding on the generator's values, not on "
                f"these: the reference on inputs a few float32 units in the last place apart "
                f"fails it ({moved})")
    return None


def _rounding_past_tolerance(ctx: Context, inputs: tuple, expected: list) -> str | None:
    """Whether the reference on `inputs` moved by rounding (value_stress.rounded_apart)
    fails the problem's check against `expected`: why, or None."""
    from krung.judge.verdict import judge_outputs

    apart = ctx.expected(tuple(rounded_apart(inputs, ctx.problem.writable_leaves(inputs),
                                             ctx.seed_for("stress-rounding", 0))))
    verdict = judge_outputs(ctx.problem, inputs, apart, expected, len(expected) > 1,
                            ctx.device)
    return None if verdict.passed else verdict.reason


def _origin(declared: dict, checked: dict, kind: str, stress: Stress | None = None) -> str:
    """What a row's label adds to its case: unseen, from a bench case, a value stress,
    shrunk from one."""
    if kind == "bench":
        return f" (bench {case_label(declared)})"
    tail = " (unseen)" if kind == "unseen" else f" (stress: {stress.name})" if stress else ""
    if checked != declared:
        tail += f" (shrunk from {case_label(declared)})"
    return tail


class KernelConduct:
    """What the checked calls' replies say of the version's own kernels: the errors it
    caught from them (krung.worker.launches) and which of them ran."""

    def __init__(self) -> None:
        self.swallowed: list[dict[str, Any]] = []
        self.launched: dict[str, int] = {}

    def add(self, reply: Any) -> None:
        self.swallowed += reply.get("swallowed") or []
        for name, count in (reply.get("own_kernels") or {}).items():
            self.launched[name] = self.launched.get(name, 0) + count

    def figures(self) -> dict[str, Any]:
        from krung.judge.contract import swallowed_said

        figures: dict[str, Any] = {}
        if self.swallowed:
            first = swallowed_said({"swallowed": self.swallowed[:1]})
            figures["swallowed_errors"] = f"{len(self.swallowed)} (first: {first})"
        if self.launched:
            figures["kernels_launched"] = dict(self.launched)
            ghosts = [name for name, count in self.launched.items() if not count]
            if ghosts:
                figures["kernels_never_launched"] = ", ".join(ghosts)
        return figures


def _usable(ctx: Context, pairs: list[tuple[dict, dict]]
            ) -> tuple[list[dict], list[str], list[str]]:
    """The unseen cases the problem itself can make inputs and a reference output for; why
    each other one is skipped (`case: the reference raised ...`); and for a problem without
    `derive_case`, the cases that move only the sizes it allows, with the sizes kept."""
    declared = ctx.problem.test_cases
    usable: list[dict] = []
    skipped: list[str] = []
    narrowings: list[str] = []
    for origin, case in pairs:
        why = unusable(ctx, case)
        if why is None:
            usable.append(case)
            continue
        if ctx.problem.derive_case is None:
            fewer, kept = narrowed(origin, case, lambda c: unusable(ctx, c) is None)
            if fewer != origin and fewer not in declared and fewer not in usable:
                usable.append(fewer)
                narrowings.append(f"{case_label(fewer)}: {', '.join(kept)} kept as declared "
                                  f"(with every size moved {why})")
                continue
        skipped.append(f"{case_label(case)}: {why}")
    return usable, skipped, narrowings


def unusable(ctx: Context, case: dict) -> str | None:
    """Why the problem cannot make inputs or a reference output for `case` (None: it can)."""
    try:
        inputs = ctx.make_inputs(case, ctx.seed_for("unseen-probe"))
    except Exception as exc:  # the problem's limits, not the version's fault
        return f"the input generator raised {_said(exc)}"
    try:
        ctx.expected(inputs)
    except Exception as exc:
        return f"the reference raised {_said(exc)}"
    return None


def _said(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}" + (f": {text[0][:160]}" if text else "")


def _nondeterminism(ctx: Context, failures: list) -> str | None:
    """Why no version can match, when the reference itself is nondeterministic (dropout in
    training mode, sampling): checked on the first failing call's inputs. Not where it is
    so by rounding only: the version was held to that spread, and failed anyway."""
    from krung.judge.rungs.determinism import reference_runs
    from krung.judge.spread import rounding_spread

    if ctx.reference_spread:
        return None
    _, rep, _, case, index = failures[0]
    try:
        inputs = ctx.make_inputs(case, ctx.seed_for("correctness", index, rep))
        first, again, why = reference_runs(ctx, inputs)
        if why and ctx.problem.tolerance_decides:  # by rounding only, or by design?
            ctx.reference_spread = rounding_spread(first, again) or []
    except Exception:  # it ran on these inputs before; whatever this is, it is not the answer
        return None
    if ctx.reference_spread:  # a version's errors far past rounding: a plain Mismatch
        return None
    return f"the reference itself is nondeterministic: {why}" if why else None


def _merge(row: dict[str, Any], figures: dict[str, Any]) -> None:
    """Keep the worst of each figure over the seeds and outputs of one case."""
    worse_if_higher = ("max_abs_err", "max_rel_err", "mse", "rmse", "mismatches", "nonfinite")
    for key in worse_if_higher:
        if key in figures:
            row[key] = max(row.get(key, 0), figures[key])
    for key in ("psnr_db", "cossim", "atol"):
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
        figures["worst_case"] = worst[1]
    figures["per_case"] = rows
    return figures


def _mismatch(failures: list, rows: list[dict[str, Any]], figures: dict[str, Any],
              nondeterministic: str | None, rounding: str | None = None) -> RungFailed:
    label, rep, verdict = failures[0][:3]
    result = verdict.comparison
    failed = [r["case"] for r in rows if not r["passed"]]
    output = f" output {verdict.out_index}" if verdict.out_index else ""
    at = ""
    if result is not None and result.first_mismatch is not None:
        at = (f"; first mismatch at {tuple(result.first_mismatch)}: got {result.got:.6g}, "
              f"expected {result.expected:.6g}")
    message = (f"{len(failed)}/{len(rows)} test cases fail; {label} seed #{rep}"
               f"{output}: {verdict.reason}{at}" + (f"; {rounding}" if rounding else ""))
    figures["failed_cases"] = failed
    figures["first_mismatch"] = result.first_mismatch if result else None
    figures["mismatch_region"] = (result.region if result else None) or None
    details = f"mismatches by dimension: {result.region}" if result and result.region else None
    if verdict.check_message:
        details = "\n".join(filter(None, [f"the problem's check said: {verdict.check_message}",
                                           details]))
    if nondeterministic:  # no version can match a reference that disagrees with itself
        figures["reference_nondeterministic"] = True
        return RungFailed("NondeterministicReference", f"{message}; {nondeterministic}",
                          "the problem is nondeterministic by design (dropout in training "
                          "mode, random sampling): an element-wise comparison cannot decide "
                          "it, and no version can pass it as it stands; a problem whose "
                          "reference draws random numbers needs its own check",
                          details=details, figures=figures)
    return RungFailed("Mismatch", message, _hint(result, rows), details=details, figures=figures)


def _hint(result: Comparison | None, rows: list[dict[str, Any]]) -> str:
    failed = [r for r in rows if not r["passed"]]
    if failed and all("stress" in r for r in failed):
        names = ", ".join(sorted({r["stress"] for r in failed}))
        return (f"right on the generator's values but not on these ({names}: the same sizes, "
                "values the problem allows that its generator rarely draws; docs/trust.md): "
                "look for paths chosen by value (thresholds, the magnitude of a prefix), "
                "clamps or approximations valid on a range only, and assumptions of balance "
                "(capacities per bin or expert, no colliding indices)")
    if result is not None and result.figures.get("nonfinite"):
        return ("NaN/Inf where the reference is finite: look for reads of unwritten memory "
                "(masked loads without `other`, padding lanes that reach a reduction) or overflow")
    if result is not None and result.pattern:
        return f"the mismatches lie in {result.pattern}"
    passed = [r["case"] for r in rows if r["passed"]]
    if passed:
        return ("some cases pass and others fail: compare their sizes; tails that are not a "
                "multiple of the block size usually point at a mask or a loop bound")
    return "every case fails: check the algorithm against the reference on the smallest case"
