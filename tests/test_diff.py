"""Two runs compared: the source diff and the figure deltas per rung, through a real store."""

from __future__ import annotations

import pytest

import krung
from krung import Run, RungResult, Status


def bench(median_a: float, median_b: float) -> list[dict]:
    return [{"case": "n=1", "median_us": median_a, "ref_median_us": 10.0, "speedup": 10 / median_a},
            {"case": "n=2", "median_us": median_b, "ref_median_us": 20.0, "speedup": 20 / median_b}]


def make_run(db: krung.Store, source: str, geomean: float, rows: list[dict],
             error: float) -> Run:
    run = Run(run_id="", problem="p", problem_path="/p", solution="/v/k.py",
              source_sha256=str(hash(source) % 10**8).rjust(64, "0"), source=source,
              device="cpu")
    db.begin(run, ["correctness", "benchmark"])
    run.rungs = [
        RungResult("correctness", Status.OK, figures={"max_abs_err": error, "cases": 2,
                                                      "per_case": [{"case": "n=1",
                                                                    "max_abs_err": error}]}),
        RungResult("benchmark", Status.OK, figures={"geomean_us": geomean, "timer": "cpu-wall",
                                                    "per_case": rows}),
    ]
    for position, rung in enumerate(run.rungs):
        db.add_rung(run.run_id, position, rung)
    db.finish(run)
    return run


def test_diff_of_two_stored_runs(store):
    db = krung.Store(store)
    old = make_run(db, "def kernel(x):\n    return x + 1\n", 30.0, bench(20.0, 40.0), 0.0)
    new = make_run(db, "def kernel(x):\n    return x.add(1)\n", 20.0, bench(10.0, 40.0), 1e-6)
    db.close()

    diff = krung.diff_runs(old.run_id[:5], new.run_id, store=store)
    assert diff["a"]["run_id"] == old.run_id and diff["b"]["run_id"] == new.run_id
    assert diff["same_source"] is False
    assert "-    return x + 1\n+    return x.add(1)\n" in diff["source_diff"]
    rungs = {r["name"]: r for r in diff["rungs"]}
    assert rungs["correctness"]["figures"]["max_abs_err"] == {"a": 0.0, "b": 1e-6,
                                                              "delta": 1e-6}
    geomean = rungs["benchmark"]["figures"]["geomean_us"]
    assert geomean["delta"] == -10.0 and geomean["ratio"] == pytest.approx(2 / 3)
    first, second = rungs["benchmark"]["per_case"]
    assert first["case"] == "n=1" and first["median_us"]["ratio"] == 0.5
    assert first["speedup"] == {"a": 0.5, "b": 1.0, "delta": 0.5, "ratio": 2.0}
    assert second["median_us"]["delta"] == 0
    assert diff["summary"] == (f"{new.run_id} is 1.5x faster than {old.run_id} (geomean of "
                               "bench-case medians)")

    same = krung.diff_runs(old.run_id, old.run_id, store=store)
    assert same["same_source"] is True and same["source_diff"] == ""
