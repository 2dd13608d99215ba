"""Graded mode: runs whose grading the version's author cannot bend (`krung run --graded`,
KRUNG_GRADED, the MCP server's default). The author bends the grading rather than the kernel
by editing the problem (its tolerance, its reference, its sidecar), by choosing the seed (and
so knowing every input), or by a setting that switches a defence off. A graded run refuses
each, as a UsageError before anything runs:

- the problem's files must be as pinned: `krung pin PROBLEM` records their hashes in the store
  (`krung init` pins the workspace's problem); a problem with no pin is refused too, since a
  pin taken by the first graded run would take whatever the author had already edited;
- no seed may be given: krung draws a secret one (`secrets`), recorded and shown once the run
  has ended, to reproduce it;
- no setting may weaken a check (WEAKENING, the one list), and the ladder holds correctness
  and the rungs it needs.

Every run, graded or not, records what it was graded under (`recorded`): `graded`,
`seed_secret`, `problem_sha256` and the settings that differ from their defaults. What the
MCP server adds (a session sees only its own runs) is in krung.host.mcp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krung.host.store import Store, opened
from krung.judge.ladder import specs
from krung.judge.problem import find_problem
from krung.judge.problem.files import changes, combined_sha256, problem_files
from krung.protocol.errors import UsageError
from krung.protocol.settings import Settings, declarations, declared

UNGRADED_HINT = "or run without --graded (KRUNG_GRADED unset), whose runs say `graded: false`"


@dataclass(frozen=True)
class Weakening:
    """A setting whose value (compared with its default) switches a defence off or down."""

    setting: str  # a field of Settings
    weak: Callable[[Any, Any], bool]  # (value, default) -> whether it weakens a check
    why: str


WEAKENING = (
    Weakening("seeds", lambda v, d: v < d, "fewer seeds per test case"),
    Weakening("cpu_check_budget_s", lambda v, d: v < d,
              "test cases shrunk further on a CPU"),
    Weakening("timed_input_changes", lambda v, d: v != "on",
              "timed inputs left unchanged: a cache keyed on input values survives"),
    Weakening("sandbox", lambda v, d: v == "off", "no walls around the worker"),
    Weakening("value_stress", lambda v, d: v == "off",
              "only the generator's values checked: approximations right on them pass"),
    Weakening("kernel_census", lambda v, d: not v,
              "kernels left unnamed: delegation undecided on a GPU"),
    Weakening("roofline_threshold_pct", lambda v, d: v < d,
              "a lower bar for `at the roofline`"),
    Weakening("extra_rungs", lambda v, d: bool(v),
              "code of your own in the judge's process"),
)


def refuse_bending(settings: Settings, rungs: list[str], seed: int | None) -> None:
    """UsageError unless a graded run may start with these settings, rungs and seed."""
    if seed is not None:
        raise UsageError("a graded run takes no seed (--seed, MCP `seed`): a chosen seed is "
                         "a known one, and with it every input",
                         hint="leave the seed out: krung draws a secret one and records it "
                              "with the run, to reproduce it later without --graded; "
                              + UNGRADED_HINT)
    defaults = Settings()
    weak = [(rule, getattr(settings, rule.setting)) for rule in WEAKENING
            if rule.weak(getattr(settings, rule.setting), getattr(defaults, rule.setting))]
    if weak:
        named = "; ".join(f"{declared(r.setting).env}={_shown(v)} ({r.why})" for r, v in weak)
        restore = " ".join(f"{declared(r.setting).env}={_shown(getattr(defaults, r.setting))}"
                           for r, _ in weak)
        raise UsageError(f"a graded run refuses settings that weaken a check: {named}",
                         hint=f"unset them or set their defaults ({restore}); " + UNGRADED_HINT)
    missing = [n for n in required_rungs() if n not in rungs]
    if missing:
        raise UsageError(f"a graded run climbs correctness and the rungs it needs; --rungs "
                         f"{','.join(rungs)} leaves out {', '.join(missing)}",
                         hint=f"add them (--rungs {','.join(_merged(rungs, missing))}) or "
                              f"leave --rungs out for the default ladder; " + UNGRADED_HINT)


def required_rungs() -> list[str]:
    """Correctness and every rung it needs, in ladder order."""
    declared_ = specs()
    needed, todo = set(), ["correctness"]
    while todo:
        name = todo.pop()
        needed.add(name)
        todo += [n for n in declared_[name].needs if n not in needed]
    return [n for n in declared_ if n in needed]


def check_pin(db: Store, problem_dir: Path, files: dict[str, str]) -> str:
    """When the problem was pinned, or UsageError: it has no pin, or its files differ from
    the pinned ones (each named)."""
    pinned = db.pinned(str(problem_dir))
    if pinned is None:
        raise UsageError(f"{problem_dir} is not pinned in {db.path}: a graded run checks the "
                         "problem's files against the hashes `krung pin` recorded",
                         hint=f"pin it once, before an agent works on it: krung pin "
                              f"{problem_dir} (krung init pins a workspace's problem); "
                              + UNGRADED_HINT)
    pinned_files, pinned_at = pinned
    changed = changes(pinned_files, files)
    if changed:
        raise UsageError(f"the problem's files differ from those pinned at {pinned_at}: "
                         f"{', '.join(changed)} (in {problem_dir})",
                         hint="restore them as they were pinned; if the change is yours, not "
                              f"the agent's, pin again: krung pin {problem_dir} --replace")
    return pinned_at


def pin_problem(problem: str | Path, *, store: str | Path | Store | None = None,
                replace: bool = False) -> dict[str, Any]:
    """Record the hashes of the problem's files in the store, for graded runs to check
    against. Pinning the same files again changes nothing; other files replace a pin only
    with `replace` (else UsageError naming the files that differ)."""
    problem_dir = find_problem(problem)
    files = problem_files(problem_dir)
    with opened(store) as db:
        pinned = db.pinned(str(problem_dir))
        differ = changes(pinned[0], files) if pinned else []
        if differ and not replace:
            raise UsageError(f"{problem_dir} is pinned already (at {pinned[1]}), with other "
                             f"files: {', '.join(differ)}",
                             hint=f"if the change is yours, replace the pin: krung pin "
                                  f"{problem} --replace; else restore the files")
        pinned_at = db.pin(str(problem_dir), files) if differ or not pinned else pinned[1]
    return {"problem_path": str(problem_dir), "problem_sha256": combined_sha256(files),
            "files": files, "pinned_at": pinned_at, "replaced": bool(differ)}


def recorded(settings: Settings, seed: int | None, files: dict[str, str]) -> dict[str, Any]:
    """What every run records of how it was graded (its env)."""
    return {"graded": settings.graded, "seed_secret": seed is None,
            "problem_sha256": combined_sha256(files), "settings": non_default(settings)}


def non_default(settings: Settings) -> dict[str, Any]:
    """The settings that differ from their defaults, by variable (the store's path and the
    judge fork server's left out: where a run is kept and how its judge started, which the
    run's `judge` says, not how it was checked)."""
    return {d.env: _shown(getattr(settings, f.name)) for f, d in declarations()
            if f.name not in ("store", "judge_forks") and getattr(settings, f.name) != f.default}


def _shown(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else int(value) if isinstance(value, bool) \
        else value


def _merged(rungs: list[str], missing: list[str]) -> list[str]:
    chosen = {*rungs, *missing}
    return [n for n in specs() if n in chosen]
