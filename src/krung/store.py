"""The run store: SQLite for runs and rung results, a folder per run for its files.

A run's row is written before its evaluation starts and each rung's row as soon as the rung
finishes, each in its own transaction, so a crash loses at most the rung in flight. WAL mode
and a busy timeout let several evaluations write to one store at once.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from krung.errors import UsageError
from krung.results import Run, RungResult, dumps

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    problem TEXT NOT NULL,
    problem_path TEXT NOT NULL,
    solution TEXT NOT NULL,
    source TEXT NOT NULL,
    source_sha256 TEXT NOT NULL,
    device TEXT NOT NULL DEFAULT 'unknown',
    env TEXT NOT NULL DEFAULT '{}',
    seed INTEGER NOT NULL,
    rungs_requested TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL DEFAULT 'running',  -- running | done | broken
    ok INTEGER,
    error TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_problem ON runs (problem, started_at);
CREATE TABLE IF NOT EXISTS rungs (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (run_id, position)
);
"""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=60000")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UsageError(f"{self.path} was written by a newer krung (schema {version})",
                             hint="upgrade krung, or use another store with --store")
        with self._db:
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    def artifacts_dir(self, run_id: str, create: bool = True) -> Path:
        folder = self.path.parent / "runs" / run_id
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        return folder

    # Writing, in the order an evaluation does it.

    def begin(self, run: Run, rungs_requested: list[str]) -> None:
        run.run_id = run.run_id or secrets.token_hex(4)
        run.started_at = run.started_at or now()
        self._write(
            "INSERT INTO runs (run_id, problem, problem_path, solution, source, source_sha256,"
            " device, seed, rungs_requested, started_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (run.run_id, run.problem, run.problem_path, run.solution, run.source,
             run.source_sha256, run.device, run.seed, json.dumps(rungs_requested),
             run.started_at))

    def add_rung(self, run_id: str, position: int, result: RungResult) -> None:
        self._write("INSERT OR REPLACE INTO rungs (run_id, position, name, status, result) "
                    "VALUES (?,?,?,?,?)",
                    (run_id, position, result.name, result.status.value,
                     dumps(result.to_json())))

    def update_env(self, run: Run) -> None:
        self._write("UPDATE runs SET device=?, env=? WHERE run_id=?",
                    (run.device, dumps(run.env), run.run_id))

    def finish(self, run: Run) -> None:
        run.finished_at = now()
        self._write("UPDATE runs SET state=?, ok=?, error=?, device=?, env=?, finished_at=? "
                    "WHERE run_id=?",
                    ("broken" if run.error else "done", int(run.ok), run.error, run.device,
                     dumps(run.env), run.finished_at, run.run_id))

    def import_run(self, run: Run, rungs_requested: list[str] | None = None) -> Run:
        """Record a whole run evaluated elsewhere (a Ray task, a remote host). It keeps its
        id unless this store already has one like it."""
        exists = self._db.execute("SELECT 1 FROM runs WHERE run_id=?", (run.run_id,)).fetchone()
        if exists or not run.run_id:
            run.run_id = secrets.token_hex(4)
        self.begin(run, rungs_requested or [r.name for r in run.rungs])
        for position, result in enumerate(run.rungs):
            self.add_rung(run.run_id, position, result)
        finished_at = run.finished_at
        self.finish(run)
        if finished_at:  # keep the remote timestamp, not the time of the import
            run.finished_at = finished_at
            self._write("UPDATE runs SET finished_at=? WHERE run_id=?", (finished_at, run.run_id))
        return run

    def discard(self, run_id: str) -> None:
        with self._db:
            self._db.execute("DELETE FROM rungs WHERE run_id=?", (run_id,))
            self._db.execute("DELETE FROM runs WHERE run_id=?", (run_id,))

    def _write(self, sql: str, args: tuple) -> None:
        with self._db:
            self._db.execute(sql, args)

    # Reading.

    def get(self, run_id: str) -> Run:
        """A run by its id or a unique prefix of it."""
        rows = self._db.execute("SELECT * FROM runs WHERE run_id LIKE ? ORDER BY started_at",
                                (run_id.replace("%", "") + "%",)).fetchall()
        if not rows:
            raise UsageError(f"no run {run_id!r} in {self.path}",
                             hint="`krung history PROBLEM` lists the runs and their ids")
        if len(rows) > 1:
            ids = ", ".join(r["run_id"] for r in rows[:10])
            raise UsageError(f"run id {run_id!r} is ambiguous: {ids}",
                             hint="give more characters of the id")
        return self._run(rows[0])

    def history(self, problem: str, limit: int = 100) -> list[Run]:
        rows = self._db.execute(
            "SELECT * FROM runs WHERE problem=? ORDER BY started_at DESC, rowid DESC LIMIT ?",
            (problem, limit)).fetchall()
        return [self._run(row) for row in rows]

    def problems(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT problem FROM runs ORDER BY 1")]

    def _run(self, row: sqlite3.Row) -> Run:
        rungs = [RungResult.from_json(json.loads(r["result"])) for r in self._db.execute(
            "SELECT result FROM rungs WHERE run_id=? ORDER BY position", (row["run_id"],))]
        run = Run(run_id=row["run_id"], problem=row["problem"], problem_path=row["problem_path"],
                  solution=row["solution"], source_sha256=row["source_sha256"],
                  device=row["device"], rungs=rungs, env=json.loads(row["env"]),
                  seed=row["seed"], started_at=row["started_at"],
                  finished_at=row["finished_at"], source=row["source"], error=row["error"])
        if row["state"] == "running":
            run.error = run.error or "unfinished: the evaluation was interrupted or is running"
        return run


@contextlib.contextmanager
def opened(store: str | Path | Store | None) -> Iterator[Store]:
    """The store given, or one opened (and closed after) from a path or the settings."""
    if isinstance(store, Store):
        yield store
        return
    from krung.settings import Settings

    db = Store(store or Settings.from_env().store)
    try:
        yield db
    finally:
        db.close()


def summary_of(run: Run) -> dict[str, Any]:
    """The figures a history line shows: verdict, first failure, time and speedup."""
    bench = run.rung("benchmark")
    failed = next((r for r in run.rungs if r.status.value == "failed"), None)
    return {
        "verdict": "ok" if run.ok else ("error" if run.error else "failed"),
        "failed_rung": failed.name if failed else None,
        "geomean_us": bench.figures.get("geomean_us") if bench and bench.ok else None,
        "speedup": bench.figures.get("speedup") if bench and bench.ok else None,
        "timer": bench.figures.get("timer") if bench and bench.ok else None,
    }
