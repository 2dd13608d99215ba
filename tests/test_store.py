"""The SQLite store: runs recorded whole, read back exactly, by id prefix; concurrent writers."""

from __future__ import annotations

import multiprocessing

import pytest

from krung.errors import UsageError
from krung.results import Run, RungResult, Status
from krung.store import Store


def make_run(problem="p", solution="/v.py") -> Run:
    return Run(run_id="", problem=problem, problem_path="/p", solution=solution,
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
    assert (tmp_path / "runs" / run.run_id).is_dir() or store.artifacts_dir(run.run_id).is_dir()


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
