"""`krung batch`: many versions of one problem through an executor, with overall progress."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from krung.host.scale import Executor, Job, Outcome
from krung.protocol.settings import Settings


def run_batch(problem: str, versions: list[str | Path], executor: Executor, settings: Settings,
              *, rungs: str | None = None, device: str | None = None,
              on_outcome: Callable[[Outcome, int, int], None] | None = None) -> list[Outcome]:
    """Evaluate every version; outcomes in the order they finish."""
    jobs = [Job(problem=problem, solution=str(v), rungs=rungs, device=device) for v in versions]
    outcomes = []
    for outcome in executor.map(jobs, settings):
        outcomes.append(outcome)
        if on_outcome:
            on_outcome(outcome, len(outcomes), len(jobs))
    return outcomes
