"""What an evaluation produces: one result per rung, and the run that holds them.

These records cross process boundaries as tagged JSON (`to_json` / `from_json`), so the
parent can rebuild exactly what the judge sent, and the store can keep it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from krung.protocol.tree import json_safe
from krung.protocol.unchecked import unchecked_paths

# A rung's error type when the judge's own code (krung's, or the problem's) raised: never a
# verdict on the version (krung.host.evaluate tries the evaluation again, then reports it).
INTERNAL_ERROR = "InternalError"

# How an interrupted run's error begins (krung.host.evaluate writes it)
INTERRUPTED = "interrupted (Ctrl-C or SIGTERM)"


class Status(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class RungResult:
    """The outcome of one rung. `error` is `Type: message`; `hint` says what to do about it."""

    name: str
    status: Status
    figures: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_type: str | None = None
    hint: str | None = None
    reason: str | None = None  # why a rung was skipped
    location: str | None = None  # file:line in the version, where one is known
    details: str | None = None  # longer text: source excerpt with a caret, a log tail
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["figures"] = json_safe(self.figures)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RungResult:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["status"] = Status(known["status"])
        return cls(**known)

    def line(self) -> str:
        """The one-line form printed as each rung finishes."""
        if self.status is Status.OK:
            return f"[{self.name}] ok  {format_figures(self.figures)}".rstrip()
        if self.status is Status.FAILED:
            where = f" ({self.location})" if self.location else ""
            return f"[{self.name}] FAILED  {self.error}{where}"
        return f"[{self.name}] skipped  {self.reason}"


UNKNOWN_DEVICE = "unknown"  # a run's device before its worker has named it (a run in flight)


@dataclass
class Run:
    """One evaluation of one version of a problem on one device."""

    run_id: str
    problem: str
    problem_path: str
    solution: str
    source_sha256: str
    device: str = UNKNOWN_DEVICE
    rungs: list[RungResult] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    started_at: str = ""
    finished_at: str | None = None
    source: str = ""
    error: str | None = None  # the evaluation itself broke (not a rung): judge crash, bad problem
    parent: str | None = None  # the run of the version this one builds on

    @property
    def ok(self) -> bool:
        """A rung passed, none failed, and the evaluation itself did not break. A rung this
        machine cannot climb (the profiler or the roofline without a GPU) is skipped without
        counting against the version; a rung skipped because one it needs failed comes with
        that failure."""
        return (self.error is None and any(r.ok for r in self.rungs)
                and not any(r.status is Status.FAILED for r in self.rungs))

    @property
    def outcome(self) -> str:
        """passed, failed (the version's verdict) or error (no verdict on the version: krung
        itself failed, or the run was interrupted; a suite's scores leave it out)."""
        if self.error:
            return "error"
        return "passed" if self.ok else "failed"

    @property
    def interrupted(self) -> bool:
        """Ctrl-C or SIGTERM stopped the evaluation (its error says where)."""
        return (self.error or "").startswith(INTERRUPTED)

    @property
    def unchecked_paths(self) -> list[dict[str, Any]]:
        """Code paths a bench case takes that no check ran (krung.protocol.unchecked): a
        passing version is not checked there, and its verdict says so."""
        return unchecked_paths(self.rungs)

    @property
    def skipped(self) -> list[RungResult]:
        return [r for r in self.rungs if r.status is Status.SKIPPED]

    def rung(self, name: str) -> RungResult | None:
        return next((r for r in self.rungs if r.name == name), None)

    def to_json(self, with_source: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "problem": self.problem,
            "solution": self.solution,
            "device": self.device,
            "outcome": self.outcome,
            "ok": self.ok,
            "unchecked_paths": self.unchecked_paths,
            "rungs": [r.to_json() for r in self.rungs],
            "error": self.error,
            "problem_path": self.problem_path,
            "source_sha256": self.source_sha256,
            "seed": self.seed,
            "env": self.env,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "parent": self.parent,
        }
        if with_source:
            data["source"] = self.source
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        """A run as `to_json(with_source=True)` wrote it (e.g. on another machine)."""
        known = {k: v for k, v in data.items()
                 if k in cls.__dataclass_fields__ and k != "rungs"}
        return cls(**known, rungs=[RungResult.from_json(r) for r in data.get("rungs", [])])


def dumps(value: Any) -> str:
    return json.dumps(json_safe(value), allow_nan=False)


def format_value(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4g}"
        return f"{value:.3g}"
    if isinstance(value, dict):
        return ",".join(f"{k}={format_value(v)}" for k, v in value.items())
    if value is None:
        return "-"
    return str(value)


def format_figures(figures: dict[str, Any]) -> str:
    """`key=value` pairs for the scalar figures; lists (per-case tables) are left to reports."""
    parts = []
    for key, value in figures.items():
        if isinstance(value, list):
            continue
        parts.append(f"{key}={format_value(value)}")
    return "  ".join(parts)
