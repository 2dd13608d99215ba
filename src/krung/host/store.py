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
import time
from collections.abc import Collection, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from krung.judge.rungs.roofline.calibration import CALIBRATION_KEY
from krung.protocol.errors import UsageError
from krung.protocol.results import Run, RungResult, dumps

SCHEMA_VERSION = 4
# Version 1: runs and their rungs.
_SCHEMA_1 = (
    """CREATE TABLE IF NOT EXISTS runs (
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
)""",
    "CREATE INDEX IF NOT EXISTS runs_by_problem ON runs (problem, started_at)",
    """CREATE TABLE IF NOT EXISTS rungs (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (run_id, position)
)""",
)
# What each later version adds to the one before it.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # A run's parent (the version it builds on), and the device's measured ceilings.
    2: (
        "ALTER TABLE runs ADD COLUMN parent TEXT",
        "CREATE INDEX IF NOT EXISTS runs_by_solution ON runs (problem, solution, started_at)",
        """CREATE TABLE IF NOT EXISTS calibrations (
    device_name TEXT NOT NULL,
    driver TEXT NOT NULL,
    torch TEXT NOT NULL,
    cuda TEXT NOT NULL,
    method INTEGER NOT NULL,
    record TEXT NOT NULL,
    measured_at TEXT NOT NULL,
    PRIMARY KEY (device_name, driver, torch, cuda, method)
)""",
    ),
    # The problems' pinned files (krung.host.grading): a graded run checks against them.
    3: (
        """CREATE TABLE IF NOT EXISTS pins (
    problem_path TEXT PRIMARY KEY,
    files TEXT NOT NULL,
    pinned_at TEXT NOT NULL
)""",
    ),
    # A problem's newest runs by its path (recent_envs: a suite asks for each of its problems
    # before the first job, and a scan of a large store takes seconds for each).
    4: (
        "CREATE INDEX IF NOT EXISTS runs_by_problem_path ON runs (problem_path, started_at)",
    ),
}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA busy_timeout=60000")
        self._use_wal()
        version = self._version()
        if version > SCHEMA_VERSION:
            raise UsageError(f"{self.path} was written by a newer krung (schema {version})",
                             hint="upgrade krung, or use another store with --store")
        if version < SCHEMA_VERSION:
            self._migrate()

    def _use_wal(self) -> None:
        """Switch a new store to WAL. The switch needs the file to itself, and SQLite answers
        "locked" at once, without waiting, while another process opens it too: retry."""
        deadline = time.monotonic() + 60
        while self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as exc:
                contended = "locked" in str(exc) or "busy" in str(exc)
                if not contended or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        """Bring the schema up to date in one transaction; the write lock makes concurrent
        openers wait, and the version is read again under it, so each step runs once."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            version = self._version()
            steps = list(_SCHEMA_1) if version < 1 else []
            for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                steps += _MIGRATIONS[target]
            for statement in steps:
                self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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
            " device, seed, rungs_requested, started_at, parent) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (run.run_id, run.problem, run.problem_path, run.solution, run.source,
             run.source_sha256, run.device, run.seed, json.dumps(rungs_requested),
             run.started_at, run.parent))

    def add_rung(self, run_id: str, position: int, result: RungResult) -> None:
        self._write("INSERT OR REPLACE INTO rungs (run_id, position, name, status, result) "
                    "VALUES (?,?,?,?,?)",
                    (run_id, position, result.name, result.status.value,
                     dumps(result.to_json())))

    def clear_rungs(self, run_id: str) -> None:
        """Forget the rungs recorded so far (a second try records its own)."""
        self._write("DELETE FROM rungs WHERE run_id=?", (run_id,))

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

    def history(self, problem: str, limit: int = 100,
                only: Collection[str] | None = None) -> list[Run]:
        """The runs of one problem, newest first. `problem` is a name with the path it was
        run from (`krung.judge.problem.identity`, what `history_name` gives for a path), or
        a bare name, which must belong to one problem's path in this store. With `only`,
        just the runs of those ids, and a bare name matches the problem at every path (no
        other run is looked at: a graded MCP session's own runs)."""
        from krung.judge.problem import parse_identity

        name, path = self.resolve(problem) if only is None else parse_identity(problem)
        among = "" if only is None else f"AND run_id IN ({','.join('?' * len(only))}) "
        rows = self._db.execute(
            f"SELECT * FROM runs WHERE problem=? AND (? IS NULL OR problem_path=?) {among}"
            "ORDER BY started_at DESC, rowid DESC LIMIT ?",
            (name, path, path, *(only or ()), limit)).fetchall()
        return [self._run(row) for row in rows]

    def resolve(self, problem: str) -> tuple[str, str | None]:
        """(name, path) of the problem `problem` means here. A problem is its name and the
        path it was run from, so `pmpp/vectoradd_py` and `pmpp_v2/vectoradd_py`, or two
        workspaces' `problem`, keep apart; a bare name shared by problems at several paths
        is a UsageError naming them."""
        from krung.judge.problem import identity, parse_identity

        name, path = parse_identity(problem)
        if path is not None:
            return name, path
        paths = self._db.execute(
            "SELECT problem_path, COUNT(*) AS runs FROM runs WHERE problem=? "
            "GROUP BY problem_path ORDER BY MAX(started_at) DESC", (name,)).fetchall()
        if len(paths) > 1:
            listed = "; ".join(f"{row['problem_path']} ({row['runs']} runs)" for row in paths)
            raise UsageError(f"{len(paths)} problems named {name} have runs in {self.path}: "
                             f"{listed}",
                             hint=f"give the problem's path instead of its name, e.g. "
                                  f"{paths[0]['problem_path']} (an identity such as "
                                  f"'{identity(name, paths[0]['problem_path'])}' works too)")
        return name, (paths[0]["problem_path"] if paths else None)

    def previous_run(self, problem: str, solution: str,
                     problem_path: str | None = None) -> str | None:
        """The id of the newest finished run of this version file on this problem (its name,
        and its path when given): the parent a new run of the file gets when none is named.
        A run still in flight (or killed before it finished) has no finish time and is never
        chosen."""
        row = self._db.execute(
            "SELECT run_id FROM runs WHERE problem=? AND solution=? AND finished_at IS NOT NULL "
            "AND (? IS NULL OR problem_path=?) ORDER BY started_at DESC, rowid DESC LIMIT 1",
            (problem, solution, problem_path, problem_path)).fetchone()
        return row["run_id"] if row else None

    def recent_envs(self, problem_path: str, limit: int = 5,
                    name: str | None = None) -> list[dict[str, Any]]:
        """The recorded environments (the measured peaks among them) of the newest runs from
        this problem path (under this name, where given: its precision and scale are part of
        it), newest first."""
        return [json.loads(r[0]) for r in self._db.execute(
            "SELECT env FROM runs WHERE problem_path=? AND (? IS NULL OR problem=?) "
            "ORDER BY started_at DESC, rowid DESC LIMIT ?",
            (problem_path, name, name, limit))]

    def children(self, run_id: str) -> list[str]:
        """The ids of the runs that name this one as their parent, oldest first."""
        return [r[0] for r in self._db.execute(
            "SELECT run_id FROM runs WHERE parent=? ORDER BY started_at, rowid", (run_id,))]

    def problems(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT problem FROM runs ORDER BY 1")]

    def _run(self, row: sqlite3.Row) -> Run:
        rungs = [RungResult.from_json(json.loads(r["result"])) for r in self._db.execute(
            "SELECT result FROM rungs WHERE run_id=? ORDER BY position", (row["run_id"],))]
        run = Run(run_id=row["run_id"], problem=row["problem"], problem_path=row["problem_path"],
                  solution=row["solution"], source_sha256=row["source_sha256"],
                  device=row["device"], rungs=rungs, env=json.loads(row["env"]),
                  seed=row["seed"], started_at=row["started_at"],
                  finished_at=row["finished_at"], source=row["source"], error=row["error"],
                  parent=row["parent"])
        if row["state"] == "running":
            run.error = run.error or "unfinished: the evaluation was interrupted or is running"
        return run


    # The problems' pins: {file name: sha256} per problem path (krung.host.grading).

    def pin(self, problem_path: str, files: dict[str, str]) -> str:
        """Pin a problem's files, replacing its pin if it has one; when, as stored."""
        pinned_at = now()
        self._write("INSERT OR REPLACE INTO pins (problem_path, files, pinned_at) "
                    "VALUES (?,?,?)", (problem_path, json.dumps(files), pinned_at))
        return pinned_at

    def pinned(self, problem_path: str) -> tuple[dict[str, str], str] | None:
        """The problem's pinned files and when they were pinned; None if it has no pin."""
        row = self._db.execute("SELECT files, pinned_at FROM pins WHERE problem_path=?",
                               (problem_path,)).fetchone()
        return (json.loads(row["files"]), row["pinned_at"]) if row else None

    # The device's measured ceilings (krung.judge.rungs.roofline.calibration), one record per key.

    def save_calibration(self, entry: dict[str, Any]) -> None:
        """Keep a calibration `{"key": {...}, "record": {...}, "measured_at": ...}`; it
        replaces one with the same key."""
        key = entry["key"]
        self._write("INSERT OR REPLACE INTO calibrations (device_name, driver, torch, cuda, "
                    "method, record, measured_at) VALUES (?,?,?,?,?,?,?)",
                    (*(key[k] for k in CALIBRATION_KEY), dumps(entry["record"]),
                     entry.get("measured_at") or now()))

    def calibrations(self) -> list[dict[str, Any]]:
        """Every kept calibration, newest first."""
        rows = self._db.execute("SELECT * FROM calibrations ORDER BY measured_at DESC")
        return [{"key": {k: row[k] for k in CALIBRATION_KEY}, "record": json.loads(row["record"]),
                 "measured_at": row["measured_at"]} for row in rows]


@contextlib.contextmanager
def opened(store: str | Path | Store | None) -> Iterator[Store]:
    """The store given, or one opened (and closed after) from a path or the settings."""
    if isinstance(store, Store):
        yield store
        return
    from krung.protocol.settings import Settings

    db = Store(store or Settings.from_env().store)
    try:
        yield db
    finally:
        db.close()


def summary_of(run: Run) -> dict[str, Any]:
    """The figures a history line shows: verdict (ok, failed, error, or stopped: Ctrl-C or
    SIGTERM ended it), first failure, time, speedup, how close to the roofline, and the
    parent run."""
    bench = run.rung("benchmark")
    failed = next((r for r in run.rungs if r.status.value == "failed"), None)
    roofline = run.rung("roofline")
    # A suspect time fails the roofline rung, but its figures still say where it stood.
    placed = roofline is not None and "pct_of_roofline" in roofline.figures
    return {
        "verdict": ("ok" if run.ok else "stopped" if run.interrupted
                    else "error" if run.error else "failed"),
        "failed_rung": failed.name if failed else None,
        "geomean_us": bench.figures.get("geomean_us") if bench and bench.ok else None,
        "speedup": bench.figures.get("speedup") if bench and bench.ok else None,
        "timer": bench.figures.get("timer") if bench and bench.ok else None,
        "pct_of_roofline": roofline.figures.get("pct_of_roofline") if placed else None,
        "roofline_verdict": roofline.figures.get("verdict") if placed else None,
        "parent": run.parent,
    }
