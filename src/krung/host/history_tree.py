"""A problem's history as a tree of versions: each run's parent, its change from the parent,
and the best run by a stated rule.

A run's parent is the run it builds on (`krung run --parent RUN_ID`, or else the previous
finished run of the same version file), so an agent can walk back from any run to the first
one. A run with no finish time is `running` (an evaluation in flight, or one killed before
it could finish), and `abandoned` once it started more than ABANDONED_AFTER ago: neither is
an error of the version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from krung.host.store import Store, opened, summary_of
from krung.protocol.errors import UsageError
from krung.protocol.results import Run

MAX_LINEAGE = 10_000  # a guard against a cycle in a hand-edited store
# A run unfinished for longer than this is no longer in flight: its evaluation was killed.
ABANDONED_AFTER = timedelta(days=1)


def unfinished_state(run: Run, now: datetime | None = None) -> str | None:
    """`running` or `abandoned` for a run the store has no finish time for, else None."""
    if run.finished_at:
        return None
    try:
        started = datetime.fromisoformat(run.started_at)
    except (TypeError, ValueError):  # no start time to judge by: it may still be running
        return "running"
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    return "abandoned" if (now or datetime.now(timezone.utc)) - started > ABANDONED_AFTER \
        else "running"


def summary_with_state(run: Run) -> dict[str, Any]:
    """The history line's figures (store.summary_of), with an unfinished run's verdict
    `running` or `abandoned` rather than `error`."""
    summary = summary_of(run)
    state = unfinished_state(run)
    if state is not None:
        summary["verdict"] = state
    return summary


@dataclass
class Entry:
    """One run in a problem's history, with its parent and its change from it."""

    run: Run
    summary: dict[str, Any]
    parent: Run | None = None
    # geomean time / the parent's - 1: negative is faster. Only for two timed runs on one
    # device with the same timer.
    time_change: float | None = None
    depth: int = 0  # 0 for a run without a parent

    def to_json(self) -> dict[str, Any]:
        run = self.run
        return {"run_id": run.run_id, "problem": run.problem, "solution": run.solution,
                "device": run.device, "ok": run.ok, "started_at": run.started_at,
                **self.summary, "time_change": self.time_change, "depth": self.depth}


def time_change(run: Run, parent: Run | None) -> float | None:
    """How much the geomean time changed from the parent (-0.2: 20% less time)."""
    if parent is None or parent.device != run.device:
        return None
    mine, theirs = summary_of(run), summary_of(parent)
    if not mine["geomean_us"] or not theirs["geomean_us"] or mine["timer"] != theirs["timer"]:
        return None
    return mine["geomean_us"] / theirs["geomean_us"] - 1


def entries_for(runs: list[Run], lookup: Callable[[str], Run | None]) -> list[Entry]:
    """The history entries of `runs` (in their order); parents outside `runs` are fetched
    with `lookup`."""
    known = {r.run_id: r for r in runs}

    def parent_of(run: Run) -> Run | None:
        if not run.parent:
            return None
        if run.parent not in known:
            found = lookup(run.parent)
            if found is None:
                return None
            known[run.parent] = found
        return known[run.parent]

    def depth_of(run: Run) -> int:
        depth, seen, current = 0, {run.run_id}, parent_of(run)
        while current is not None and current.run_id not in seen and depth < MAX_LINEAGE:
            seen.add(current.run_id)
            depth += 1
            current = parent_of(current)
        return depth

    return [Entry(run, summary_with_state(run), parent_of(run),
                  time_change(run, parent_of(run)), depth_of(run)) for run in runs]


def history(problem: str, *, limit: int = 50,
            store: str | Path | Store | None = None) -> list[Entry]:
    """A problem's runs, newest first, each with its parent and its change from it."""
    with opened(store) as db:
        return entries_for(db.history(problem, limit), lookup_in(db))


def lineage(run_id: str, *, store: str | Path | Store | None = None) -> list[Run]:
    """The run (an id or unique prefix), its parent, its parent's parent, ... to the root."""
    with opened(store) as db:
        chain = [db.get(run_id)]
        seen = {chain[0].run_id}
        while chain[-1].parent and len(chain) < MAX_LINEAGE:
            parent = lookup_in(db)(chain[-1].parent)
            if parent is None or parent.run_id in seen:
                break
            seen.add(parent.run_id)
            chain.append(parent)
    return chain


def lookup_in(db: Store) -> Callable[[str], Run | None]:
    """A run by id from `db`, or None when it is not there."""

    def get(run_id: str) -> Run | None:
        try:
            return db.get(run_id)
        except UsageError:  # a parent removed from the store
            return None

    return get


# How `best` picks, by rule name: (what the rule says, the key to minimise, the figure).
BEST_RULES: dict[str, tuple[str, Callable[[dict[str, Any]], float], str]] = {
    "time": ("lowest geomean of bench-case medians among passing runs on {device}",
             lambda s: s["geomean_us"], "geomean_us"),
    "roofline": ("highest geomean % of the roofline over bench cases among passing runs on "
                 "{device}", lambda s: -s["pct_of_roofline"], "pct_of_roofline"),
}


def best(runs: list[Run], rule: str = "time") -> tuple[Run, str, int] | None:
    """The best of `runs` by `rule` (BEST_RULES), the rule's text, and how many runs it chose
    among; None when no run qualifies. Only runs on the newest qualifying run's device are
    compared: times on different devices say nothing about each other."""
    if rule not in BEST_RULES:
        raise UsageError(f"unknown rule {rule!r} for best",
                         hint=f"choose from: {', '.join(BEST_RULES)}")
    text, key, figure = BEST_RULES[rule]
    candidates = [(r, summary_of(r)) for r in runs]
    candidates = [(r, s) for r, s in candidates if r.ok and s[figure] is not None]
    if not candidates:
        return None
    device = candidates[0][0].device  # runs come newest first
    same = [(r, s) for r, s in candidates if r.device == device]
    chosen = min(same, key=lambda pair: key(pair[1]))[0]
    return chosen, text.format(device=device), len(same)


def best_run(problem: str, *, rule: str = "time",
             store: str | Path | Store | None = None) -> tuple[Entry, str, int] | None:
    """The best recorded run of a problem by `rule` (see `best`), as a history entry."""
    with opened(store) as db:
        chosen = best(db.history(problem, limit=10_000), rule)
        if chosen is None:
            return None
        run, text, among = chosen
        return entries_for([run], lookup_in(db))[0], text, among
