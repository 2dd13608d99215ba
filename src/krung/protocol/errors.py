"""Errors that carry the facts and the fix.

Agents read these: the hint is its own field, never buried in the message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from krung.protocol.results import Run


class KrungError(Exception):
    """A problem the user can fix; `hint` says how."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(KrungError):
    """Bad arguments: a path that does not exist, an unknown rung name."""


class ProblemError(KrungError):
    """A problem directory that cannot be evaluated; each defect names its fix."""

    def __init__(self, path: str, defects: list[tuple[str, str]]):
        self.path = path
        self.defects = defects  # (what is wrong, how to fix it)
        lines = [f"problem {path} has {len(defects)} defect(s):"]
        lines += [f"  - {what}  (fix: {fix})" for what, fix in defects]
        super().__init__("\n".join(lines), hint=defects[0][1] if defects else None)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped an evaluation: `run` is what was recorded by then (the rungs
    finished, and its error saying where it was stopped). A KeyboardInterrupt still, so
    whatever stops on Ctrl-C stops on it."""

    def __init__(self, run: Run):
        super().__init__(run.error)
        self.run = run


class RungFailed(Exception):
    """Raised inside a rung to fail it with an explained error.

    `error_type` is the kind of failure as an agent would search for it (`CompileError`,
    `Mismatch`, `Timeout`, `WorkerCrashed`, or the version's own exception type).
    """

    def __init__(
        self,
        error_type: str,
        message: str,
        hint: str | None = None,
        *,
        location: str | None = None,
        details: str | None = None,
        figures: dict | None = None,
    ):
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        self.hint = hint
        self.location = location
        self.details = details
        self.figures = figures or {}
