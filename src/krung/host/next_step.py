"""The `next:` line of an agent's verdict: a command that runs as printed, then why.

`next: krung run softmax versions/v1.py --rungs static,compile,run,correctness --format agent
 # the outputs are wrong on ...`: the command keeps the flags of the turn that printed it
(`Turn`: the front end passes what it was given; a recorded run gives its own problem, version,
rungs and device), so an agent that runs it gets the same kind of answer back; the words after
`#` (a shell comment) say why it is the next step.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from krung.judge.ladder import select
from krung.protocol.results import INTERNAL_ERROR, Run, RungResult, Status, format_value

AGENT_FLAGS = ("--format", "agent")
AGAIN = "then run this again (on the new version's file, if the fix is a new file)"


@dataclass(frozen=True)
class Turn:
    """The `krung run` whose verdict is printed: the problem and version as given, the rungs
    asked for (None: the default ladder), the other options given (flags and values, as
    typed), and the store."""

    problem: str
    solution: str
    rungs: str | None = None
    flags: tuple[str, ...] = AGENT_FLAGS
    store: str | None = None

    @classmethod
    def of_run(cls, run: Run, store: str | None = None) -> Turn:
        """A recorded run's turn (`krung show`, the MCP tools): its problem and version
        paths, and the rungs it climbed where they are not the default ladder."""
        climbed = [r.name for r in run.rungs]  # all asked for, unless krung broke mid-way
        rungs = None if run.error or not climbed or climbed == select(None) \
            else ",".join(climbed)
        return cls(run.problem_path, run.solution, rungs, AGENT_FLAGS, store)

    def run_command(self, rungs: str | None = None, device: str | None = None,
                    env: str = "") -> str:
        """`krung run` again with this turn's options; `rungs` and `device` replace its own."""
        flags = list(self.flags)
        if device is not None:
            flags = [*_without(flags, "--device"), "--device", device]
        rungs = rungs or self.rungs
        words = ["run", self.problem, self.solution, *(["--rungs", rungs] if rungs else []),
                 *flags]
        return (f"{env} " if env else "") + self.command(*words)

    def command(self, *words: str) -> str:
        """`krung WORDS`, quoted for a shell, with this turn's store."""
        store = ["--store", self.store] if self.store else []
        return shlex.join(["krung", *words, *store])


def _without(flags: list[str], flag: str) -> list[str]:
    """`flags` less `flag` and its value."""
    if flag not in flags:
        return flags
    at = flags.index(flag)
    return flags[:at] + flags[at + 2:]


def next_line(run: Run, failed: RungResult | None, turn: Turn | None = None) -> str:
    command, why = next_step(run, failed, turn or Turn.of_run(run))
    return f"next: {command}  # {why}"


def next_step(run: Run, failed: RungResult | None, turn: Turn) -> tuple[str, str]:
    """The command to run next and why."""
    if run.interrupted:
        return turn.run_command(), ("stopped before its verdict: run it again; the error says "
                                    "the step it was stopped in")
    if run.error:
        return turn.run_command(), (
            f"krung failed, not your version: run it again; if the error repeats, it is a "
            f"krung bug (its log: {turn.command('artifacts', run.run_id, '--name', 'judge.log')})")
    if failed is not None:
        return _after_failure(run, failed, turn)
    roofline = run.rung("roofline")
    if roofline is not None and roofline.ok:
        figures = roofline.figures
        if figures.get("verdict") == "at-roofline":
            return turn.command("best", turn.problem), (
                "every bench case is at the roofline: stop optimising this kernel, or cut "
                "the work itself (fewer bytes or flops)")
        if figures.get("next_step"):  # from the measured limiter (roofline/next_step)
            return turn.run_command(), f"{figures['next_step']}; then run the new version"
        return turn.run_command(rungs=_with(run, "profile")), (
            f"{format_value(figures.get('pct_of_roofline'))}% of the roofline; the furthest "
            f"case is {figures.get('worst_case')}: {figures.get('limiter')}; the profile rung "
            "says why")
    # A rung skipped for want of a GPU is no step to take; one skipped for a need is, and a
    # correctness left unchecked is the first thing to say.
    skipped = [r for r in run.rungs if r.status is Status.SKIPPED
               and (r.reason or "").startswith("needs ")]
    roots = [r for r in run.rungs if r.status is Status.SKIPPED
             and not (r.reason or "").startswith("needs ")]
    correctness = run.rung("correctness")
    if correctness is not None and correctness.status is Status.SKIPPED and roots:
        return turn.run_command(device="cuda"), (
            f"correctness is not checked yet: {roots[0].name} was skipped ({roots[0].reason}); "
            "evaluate it on a GPU machine before relying on this version")
    if skipped:
        return turn.run_command(), f"{skipped[0].name} was skipped: {skipped[0].reason}"
    if correctness is None:  # the rungs asked for stopped short of it
        return turn.run_command(rungs=_with(run, "correctness")), (
            f"nothing failed, but correctness was not asked for (rungs "
            f"{','.join(r.name for r in run.rungs)}): climb it")
    if run.unchecked_paths:
        return _unchecked(run, turn)
    bench = run.rung("benchmark")
    if bench is None:
        return turn.run_command(rungs=_with(run, "benchmark")), (
            "the version is correct; climb the benchmark rung to time it")
    rows = [r for r in bench.figures.get("per_case") or [] if r.get("speedup")]
    slowest = min(rows, key=lambda r: r["speedup"], default=None)
    if bench.figures.get("timer") == "cpu-wall":
        return turn.command("history", turn.problem), (
            "correct; its times are interpreter times on a CPU, which say little about the "
            "GPU: compare it with earlier versions, and time it on a GPU machine (--device "
            "cuda) before optimising")
    if slowest is not None and slowest["speedup"] < 1:
        slower = sum(r["speedup"] < 1 for r in rows)
        return turn.run_command(), (
            f"correct but slower than the reference on {slower} of {len(rows)} bench "
            f"case(s), most on {slowest['case']}: optimise that case, then run the new version")
    target = f", the least gain on {slowest['case']}" if slowest is not None else ""
    return turn.command("history", turn.problem), (
        f"correct and faster than the reference{target}; compare with earlier versions "
        "(history, `krung diff A B`) before the next optimisation")


def _with(run: Run, rung: str) -> str:
    """The rungs this run climbed, and `rung`."""
    return ",".join([*(r.name for r in run.rungs if r.name != rung), rung])


def _after_failure(run: Run, failed: RungResult, turn: Turn) -> tuple[str, str]:
    where = f" at {failed.location}" if failed.location else ""
    kind = failed.error_type or "error"
    if kind == "Mismatch":
        cases = failed.figures.get("failed_cases") or []
        first = f" (start with {cases[0]})" if cases else ""
        return turn.run_command(), (
            f"the outputs are wrong on some cases{first}: compare the failing and the passing "
            f"sizes, follow the hint, fix, {AGAIN}")
    if kind in ("WorkerCrashed", "Timeout", "WorkerDead"):
        return turn.command("artifacts", run.run_id, "--name", "worker.log"), (
            f"the version's process {'hung' if kind == 'Timeout' else 'died'}{where}: its "
            "log holds its stack; fix, and run the version again")
    if kind == INTERNAL_ERROR:
        return turn.run_command(), ("the problem's code or krung raised this, not the "
                                    "version: read the details, then run it again")
    see = " (see the hint)" if failed.hint else ""
    return turn.run_command(), f"fix the {kind}{where}{see}, {AGAIN}"


def _unchecked(run: Run, turn: Turn) -> tuple[str, str]:
    """A CPU budget that reaches every bench case's path: a bench shape gets at least an
    eighth of the budget (krung.judge.problem.cpu_budget)."""
    paths = run.unchecked_paths
    costs = [p["cost_s"] for p in paths if "cost_s" in p]
    correctness = run.rung("correctness")
    now = (correctness.figures.get("cpu_budget_s") if correctness else None) or 0
    budget = math.ceil(max([8 * c for c in costs] + [4 * now, 12]))
    cases = list(dict.fromkeys(p["case"] for p in paths))
    return turn.run_command(env=f"KRUNG_CPU_CHECK_BUDGET={budget}"), (
        f"correct where checked, but {len(cases)} bench case(s) take a path never checked "
        f"here (first {cases[0]}; `unchecked paths` names them): check them with a larger "
        "CPU budget, or on a GPU (--device cuda)")
