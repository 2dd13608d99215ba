"""The SQLite store: runs recorded whole, read back exactly, by id prefix; concurrent writers."""

from __future__ import annotations

import multiprocessing

import pytest

from krung.host.store import Store
from krung.protocol.errors import UsageError
from krung.protocol.results import Run, RungResult, Status


def make_run(problem="p", solution="/v.py", path="/p") -> Run:
    return Run(run_id="", problem=problem, problem_path=path, solution=solution,
               source_sha256="ab" * 32, source="def kernel(x):\n    return x\n", seed=7)


def test_a_run_is_written_as_it_goes_and_read_back(tmp_path):
    store = Store(tmp_path / "k.db")
    run = make_run()
    store.begin(run, ["static", "benchmark"])
    assert store.get(run.run_id).error.startswith("unfinished")  # visible before it ends
    ok = RungResult("static", Status.OK, figures={"dsl": "torch", "x": float("nan")})
    bench = RungResult("benchmark", Status.OK, figures={"geomean_us": 12.5, "speedup": 2.0,
                                                         "per_case": [{"case": "n=1"}]})
    store.add_rung(run.run_id, 0, ok)
    store.add_rung(run.run_id, 1, bench)
    run.rungs = [ok, bench]
    run.env = {"device": "cpu", "torch": "2.x"}
    store.finish(run)
    back = store.get(run.run_id[:3])
    assert back.ok and back.error is None
    assert back.rungs[0].figures == {"dsl": "torch", "x": None}
    assert back.rungs[1].figures["per_case"] == [{"case": "n=1"}]
    assert back.env == {"device": "cpu", "torch": "2.x"}
    assert back.source == run.source and back.seed == 7
    # The run's files go to runs/<id>/ beside the store, a folder made when first asked for.
    folder = store.artifacts_dir(run.run_id, create=False)
    assert folder == tmp_path / "runs" / run.run_id and not folder.exists()
    assert store.artifacts_dir(run.run_id) == folder and folder.is_dir()


def test_history_is_newest_first_and_unknown_ids_are_explained(tmp_path):
    store = Store(tmp_path / "k.db")
    ids = []
    for _ in range(3):
        run = make_run()
        store.begin(run, [])
        store.finish(run)
        ids.append(run.run_id)
    assert [r.run_id for r in store.history("p")] == list(reversed(ids))
    assert store.history("other") == []
    with pytest.raises(UsageError, match="no run"):
        store.get("not-an-id")


def _write_runs(path: str, count: int) -> None:
    store = Store(path)
    for i in range(count):
        run = make_run(solution=f"/v{i}.py")
        store.begin(run, ["static"])
        store.add_rung(run.run_id, 0, RungResult("static", Status.OK, figures={"i": i}))
        run.rungs = [RungResult("static", Status.OK)]
        store.finish(run)


def test_eight_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "k.db")
    Store(path).close()
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_write_runs, args=(path, 10)) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    runs = Store(path).history("p", limit=1000)
    assert len(runs) == 80
    assert all(r.ok and len(r.rungs) == 1 for r in runs)


# Version 1 of the schema, as krung 0.1 wrote it: no parents, no calibrations.
SCHEMA_1 = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, problem TEXT NOT NULL, problem_path TEXT NOT NULL,
    solution TEXT NOT NULL, source TEXT NOT NULL, source_sha256 TEXT NOT NULL,
    device TEXT NOT NULL DEFAULT 'unknown', env TEXT NOT NULL DEFAULT '{}',
    seed INTEGER NOT NULL, rungs_requested TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL DEFAULT 'running', ok INTEGER, error TEXT,
    started_at TEXT NOT NULL, finished_at TEXT);
CREATE INDEX runs_by_problem ON runs (problem, started_at);
CREATE TABLE rungs (run_id TEXT NOT NULL REFERENCES runs (run_id), position INTEGER NOT NULL,
    name TEXT NOT NULL, status TEXT NOT NULL, result TEXT NOT NULL,
    PRIMARY KEY (run_id, position));
INSERT INTO runs (run_id, problem, problem_path, solution, source, source_sha256, seed, state,
    ok, started_at, finished_at) VALUES ('0ld1d', 'p', '/p', '/v.py', 'src', 'ab', 3, 'done',
    1, '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:09+00:00');
INSERT INTO rungs VALUES ('0ld1d', 0, 'static', 'ok',
    '{"name": "static", "status": "ok", "figures": {"lines": 2}}');
PRAGMA user_version=1;
"""


def test_a_version_1_store_is_migrated_and_keeps_its_runs(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(SCHEMA_1)
    old.close()
    store = Store(path)
    assert store._version() == 4
    back = store.get("0ld1d")
    assert back.parent is None and back.rungs[0].figures == {"lines": 2} and back.ok
    run = make_run(solution="/v.py")
    run.parent = "0ld1d"
    store.begin(run, [])
    store.finish(run)
    assert store.get(run.run_id).parent == "0ld1d"
    assert store.children("0ld1d") == [run.run_id]
    store.close()
    assert Store(path)._version() == 4  # a second open has nothing to do


def _recent_envs_plan(store: Store, problem_path: str) -> str:
    """How SQLite runs the query recent_envs sends (caught as sent, its values in place)."""
    sent: list[str] = []
    store._db.set_trace_callback(sent.append)
    store.recent_envs(problem_path)
    store._db.set_trace_callback(None)
    return " ".join(row[-1] for row in store._db.execute(f"EXPLAIN QUERY PLAN {sent[-1]}"))


@pytest.mark.parametrize("version", [1, 3])
def test_an_older_store_finds_a_problems_newest_runs_by_an_index(tmp_path, version):
    """A suite asks for each problem's newest runs before its first job: on an older store
    too, SQLite finds them by the index of runs by problem path, not by a scan."""
    import random
    import sqlite3

    from krung.host.store import _MIGRATIONS

    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(SCHEMA_1)
    for step in range(2, version + 1):
        for statement in _MIGRATIONS[step]:
            old.execute(statement)
    old.execute(f"PRAGMA user_version={version}")
    old.close()
    store = Store(path)
    assert "USING INDEX runs_by_problem_path" in _recent_envs_plan(store, "/p")
    rng = random.Random()
    written: dict[str, list[float]] = {"/p": [], "/q": []}
    for _ in range(rng.randint(8, 16)):  # most in one second: the order written breaks ties
        run = make_run(path=rng.choice(list(written)))
        run.env = {"worker_device_peak_mib": rng.uniform(1, 80_000)}
        store.begin(run, [])
        store.update_env(run)
        store.finish(run)
        written[run.problem_path].append(run.env["worker_device_peak_mib"])
    newest = [env.get("worker_device_peak_mib") for env in store.recent_envs("/p", limit=3)]
    assert newest == [*written["/p"][::-1], None][:3]  # then the old store's run, with none


def _open_old_store(path: str) -> None:
    Store(path).close()


def test_concurrent_openers_migrate_once(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(SCHEMA_1)
    old.close()
    ctx = multiprocessing.get_context("spawn")
    openers = [ctx.Process(target=_open_old_store, args=(str(path),)) for _ in range(6)]
    for p in openers:
        p.start()
    for p in openers:
        p.join(120)
        assert p.exitcode == 0  # a second ALTER TABLE would have failed one of them
    assert Store(path).get("0ld1d").parent is None


def test_a_store_from_a_newer_krung_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "new.db"
    newer = sqlite3.connect(path)
    newer.execute("PRAGMA user_version=99")
    newer.close()
    with pytest.raises(UsageError, match="newer krung"):
        Store(path)


def test_the_previous_run_of_a_file_is_its_default_parent(tmp_path):
    store = Store(tmp_path / "k.db")
    assert store.previous_run("p", "/v.py") is None
    first, other, second = make_run(), make_run(solution="/w.py"), make_run()
    for run in (first, other, second):
        store.begin(run, [])
        store.finish(run)
    assert store.previous_run("p", "/v.py") == second.run_id
    assert store.previous_run("p", "/w.py") == other.run_id
    assert store.previous_run("q", "/v.py") is None


def test_problems_of_one_name_at_two_paths_keep_apart(tmp_path):
    """`pmpp/vectoradd_py` and `pmpp_v2/vectoradd_py`, or the problems of two workspaces:
    one name, two problems. Their history and parents keep apart; a bare name that belongs
    to both asks for the path, and one that belongs to one still works (so do stores
    written before, whose runs already carry their path)."""
    from krung.judge.problem import identity

    store = Store(tmp_path / "k.db")
    old, new = "/ext/pmpp/vectoradd_py", "/ext/pmpp_v2/vectoradd_py"
    runs = {path: [make_run("vectoradd_py", path=path) for _ in range(2)] for path in (old, new)}
    for pair in zip(runs[old], runs[new], strict=True):
        for run in pair:
            run.parent = store.previous_run(run.problem, run.solution, run.problem_path)
            store.begin(run, [])
            store.finish(run)
    for path, (first, second) in runs.items():
        assert first.parent is None and second.parent == first.run_id
        assert [r.run_id for r in store.history(identity("vectoradd_py", path))] == \
            [second.run_id, first.run_id]
    with pytest.raises(UsageError) as caught:
        store.history("vectoradd_py")
    assert "2 problems named vectoradd_py have runs" in caught.value.message
    assert old in caught.value.message and new in caught.value.message
    assert "give the problem's path" in caught.value.hint
    only = make_run("matmul_py", path="/ext/pmpp/matmul_py")
    store.begin(only, [])
    store.finish(only)
    assert [r.run_id for r in store.history("matmul_py")] == [only.run_id]
    assert store.history(identity("matmul_py", "/elsewhere/matmul_py")) == []


def test_calibrations_are_kept_by_key_and_replaced(tmp_path):
    store = Store(tmp_path / "k.db")
    key = {"device_name": "NVIDIA H200", "driver": "570.1", "torch": "2.13.0",
           "cuda": "12.8", "method": 1}
    store.save_calibration({"key": key, "record": {"dram_bytes_per_s": 4.1e12},
                            "measured_at": "2026-12-01T00:00:00+00:00"})
    store.save_calibration({"key": {**key, "driver": "580.2"},
                            "record": {"dram_bytes_per_s": 4.2e12},
                            "measured_at": "2026-12-02T00:00:00+00:00"})
    store.save_calibration({"key": key, "record": {"dram_bytes_per_s": 4.3e12,
                                                   "x": float("nan")},
                            "measured_at": "2026-12-03T00:00:00+00:00"})
    kept = store.calibrations()
    assert [e["record"]["dram_bytes_per_s"] for e in kept] == [4.3e12, 4.2e12]  # newest first
    assert kept[0]["key"] == key and kept[0]["record"]["x"] is None
    assert Store(tmp_path / "k.db").calibrations() == kept
