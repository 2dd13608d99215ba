"""determinism: the same inputs twice, with the output memory poisoned differently each time,
must give the same bits. A difference is a race (an order of operations that changes between
runs) or a read of memory nothing wrote (the poison shows through); the rung says where.
Where the reference itself gives other bits on the same inputs, or draws from torch's global
generator on every call (dropout in training mode), the problem is nondeterministic by design
and the rung is skipped, saying so.

On a GPU with `--sanitize`, the version also runs once under compute-sanitizer (memcheck,
racecheck, initcheck) and its findings are the rung's result.
"""

from __future__ import annotations

from typing import Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.problem import case_label, case_size
from krung.judge.rungs.spec import Figure, RungSpec
from krung.protocol.errors import RungFailed
from krung.worker.guard import NAN_BYTE, OTHER_BYTE

# compute-sanitizer's tools (krung.judge.rungs.determinism.sanitize runs them).
TOOLS = ("memcheck", "racecheck", "initcheck")
_SANITIZE = "with --sanitize (KRUNG_SANITIZE=1, GPU)"
SPEC = RungSpec(
    "determinism", order=50, needs=("correctness",),
    checks="the largest test case twice, output memory poisoned differently each time: the "
           "same bits, or a race / uninitialised read reported with where; skipped where the "
           "reference itself is nondeterministic; with `--sanitize` (`KRUNG_SANITIZE=1`, "
           "GPU) also compute-sanitizer memcheck (4 KiB red zones after every allocation), "
           "racecheck and initcheck on one call, each in a worker left to exit by itself so "
           "the tool writes its summary; the tool's exit status overrules its log, a log "
           "without a summary fails (`SanitizerIncomplete`), and so does a version that "
           "raises or does not load under the tool (`SanitizerRunFailed`); racecheck's "
           "warnings (benign hazards) are counted, not failed on",
    figures=(
        Figure("case", "", "the case run twice", "text"),
        Figure("runs", "", "the runs compared", "count"),
        Figure("identical", "", "whether the two runs gave the same bits", "flag"),
        Figure("shrunk_from", "", "the largest test case, of which `case` is the form a CPU "
               "affords (KRUNG_CPU_CHECK_BUDGET)", "text", when="on a CPU, when shrunk"),
        Figure("differing", "", "the elements that differ between the runs", "count",
               when="on Nondeterministic"),
        *(Figure(f"{tool}_errors", "", f"errors compute-sanitizer {tool} found", "count",
                 when=_SANITIZE) for tool in TOOLS),
        *(Figure(tool, "", f"errors compute-sanitizer {tool} found", "count",
                 when="on SanitizerError") for tool in TOOLS),
    ))


def run(ctx: Context) -> dict[str, Any]:
    from krung.judge.metrics import bit_differences

    declared = max(ctx.problem.test_cases, key=case_size)  # races show best on the largest
    case = _affordable(ctx, declared)
    label = case_label(case)
    inputs = ctx.make_inputs(case, ctx.seed_for("determinism"))
    expected, why = reference_nondeterminism(ctx, inputs)
    if why:  # then a version need not be reproducible either
        how = ("by rounding (a nondeterministic library algorithm)"
               if ctx.reference_spread else "by design")
        raise RungSkipped(f"the reference itself is nondeterministic {how} (case {label}): "
                          f"{why}")
    first = ctx.checked_call(inputs, expected, f"case {label}, first run",
                             poison_byte=NAN_BYTE)["outputs"]
    second = ctx.checked_call(inputs, expected, f"case {label}, second run",
                              poison_byte=OTHER_BYTE)["outputs"]
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        region = bit_differences(a, b)
        count = region.count
        if count:
            where = region.describe()
            raise RungFailed(
                "Nondeterministic",
                f"output {index} differs between two runs on the same inputs in {count}/"
                f"{a.numel()} elements (case {label}); {where}",
                "a race (a missing barrier, or blocks that depend on each other in one launch) "
                "or a read of memory nothing wrote (uninitialised accumulators, padding lanes)",
                figures={"case": label, "differing": count})
    figures: dict[str, Any] = {"case": label, "runs": 2, "identical": True}
    if case != declared:
        figures["shrunk_from"] = case_label(declared)
    if ctx.settings.sanitize:
        figures.update(_sanitize(ctx, case))
    return figures


def _affordable(ctx: Context, case: dict) -> dict:
    """On a CPU, the case shrunk (as the correctness rung shrinks them, with the cost it
    learned there) so its two runs fit a quarter of the CPU check budget; as declared where
    the problem cannot make that smaller case (a size that must stay a multiple of its
    chunk), as the correctness rung does."""
    from krung.judge.problem.cpu_budget import CostModel, shrink
    from krung.judge.rungs.correctness import unusable

    checked = ctx.results.get("correctness")
    cost = checked.figures.get("cpu_cost") if checked is not None else None
    if ctx.device != "cpu" or not cost:
        return case
    model = CostModel(coefficients=(cost["call_s"], cost["per_outer_s"], cost["per_size_s"]))
    share = ctx.settings.cpu_check_budget_s / 4

    def fits(candidate: dict) -> bool:
        return 2 * model.predict(candidate) <= share

    smaller = shrink(case, fits, keep_block=True)
    if not fits(smaller):
        smaller = shrink(smaller, fits)
    return smaller if smaller == case or unusable(ctx, smaller) is None else case


def reference_nondeterminism(ctx: Context, inputs: tuple) -> tuple[list, str | None]:
    """The reference's outputs on `inputs`, and why it is nondeterministic by design (None
    when it is not seen to be): reference_runs without its second answer."""
    first, _, why = reference_runs(ctx, inputs)
    return first, why


def reference_runs(ctx: Context, inputs: tuple) -> tuple[list, list, str | None]:
    """The reference's two answers on `inputs`, and why it is nondeterministic by design
    (None when it is not seen to be): the two differ in bits (atomics, sampling), or each
    call draws from torch's global generator (dropout in training mode, an LSTM's
    `torch.randn` initial state), which a reference that seeds itself does not."""
    import torch

    from krung.judge.metrics import bit_differences

    def state() -> list:
        states = [torch.get_rng_state()]
        if ctx.device == "cuda":
            states.append(torch.cuda.get_rng_state())
        return states

    before = state()
    first = ctx.expected(inputs)
    between = state()
    again = ctx.expected(inputs)
    after = state()
    for index, (a, b) in enumerate(zip(first, again, strict=True)):
        region = bit_differences(a, b)
        if region.count:
            return first, again, (f"run twice on the same inputs, its output {index} "
                                  f"differs in {region.count}/{a.numel()} elements "
                                  f"({region.describe()})")
    if _moved(before, between) and _moved(between, after):
        return first, again, ("every call draws from torch's global random generator "
                              "(dropout in training mode, torch.randn in forward)")
    return first, again, None


def _moved(old: list, new: list) -> bool:
    import torch

    return not all(torch.equal(a, b) for a, b in zip(old, new, strict=True))


def _sanitize(ctx: Context, case: dict) -> dict[str, Any]:
    if ctx.device != "cuda":
        raise RungSkipped("--sanitize needs a CUDA GPU (compute-sanitizer checks device code)")
    from krung.judge.rungs.determinism.sanitize import run_sanitizers

    findings = run_sanitizers(ctx, case)
    errors = {tool: f for tool, f in findings.items() if f["errors"]}
    if errors:
        tool, first = next(iter(errors.items()))
        raise RungFailed("SanitizerError",
                         f"compute-sanitizer {tool} reports {first['errors']} error(s): "
                         f"{first['first'] or 'its exit status says so; see the report'}",
                         "read the report in the details; memcheck finds out-of-bounds "
                         "accesses, racecheck shared-memory races, initcheck reads of "
                         "uninitialised device memory",
                         details="\n\n".join(f["report"] for f in errors.values()),
                         figures={t: f["errors"] for t, f in findings.items()})
    failed = [tool for tool, f in findings.items() if not f["ran"]["ok"]]
    if failed:  # it raised (or did not load) under the tool: the tool checked nothing
        error = findings[failed[0]]["ran"]["error"] or {}
        raise RungFailed("SanitizerRunFailed",
                         f"the version failed under compute-sanitizer {failed[0]}: "
                         f"{error.get('type', 'error')}: {error.get('message', '')}".strip(),
                         "it runs without the tool: make it run with it too (under the "
                         "sanitizers each tensor is its own allocation, with red zones, and "
                         "work is slower); the worker's log is in the run's folder",
                         location=error.get("location"),
                         details=error.get("details"))
    cut = [tool for tool, f in findings.items() if not f["complete"]]
    if cut:  # no summary: the tool stopped early, so "no errors listed" proves nothing
        raise RungFailed("SanitizerIncomplete",
                         f"compute-sanitizer {', '.join(cut)} ended without its error summary "
                         f"({_ending(findings[cut[0]].get('exit_code'))})",
                         "the worker under the tool did not exit by itself (a hang, a crash "
                         "of the tool, or the version ended it); read the reports in the "
                         "details, and run again",
                         details="\n\n".join(findings[t]["report"] for t in cut))
    return {f"{tool}_errors": 0 for tool in findings}


def _ending(code: int | None) -> str:
    return "killed: it did not exit by itself" if code is None else f"exit status {code}"
