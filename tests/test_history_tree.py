"""History as a tree: parents (named, or the previous run of the same file), the change from
the parent, lineage back to the root, and `best` by a stated rule; through the API on
recorded GPU-like runs, and through the real `krung` command on real CPU runs."""

from __future__ import annotations

import pytest

import krung
from krung.host.history_tree import best, entries_for, lookup_in, time_change
from krung.host.store import Store
from tests.conftest import GOOD
from tests.recorded import H200, matmul_history, record_run

FASTER = """
def kernel(x):
    return x + x + 1
"""


@pytest.fixture
def recorded(tmp_path):
    store = Store(tmp_path / "store" / "krung.db")
    yield store, matmul_history(store)
    store.close()


def test_entries_carry_parent_depth_and_the_change_in_time(recorded):
    store, runs = recorded
    entries = krung.history("matmul", store=store)
    by_id = {e.run.run_id: e for e in entries}
    assert [e.run.run_id for e in entries] == [runs[k].run_id for k in (
        "v6_suspect", "v5", "v4_slower", "v3", "v2_wrong", "v1")]  # newest first
    v1, v3, v4, v5 = (by_id[runs[k].run_id] for k in ("v1", "v3", "v4_slower", "v5"))
    assert v1.parent is None and v1.depth == 0 and v1.time_change is None
    assert v3.parent.run_id == runs["v1"].run_id and v3.depth == 1
    assert v4.depth == 2 and v5.depth == 2  # two branches from v3
    g = v3.summary["geomean_us"] / v1.summary["geomean_us"] - 1
    assert v3.time_change == pytest.approx(g) and v3.time_change < 0  # faster
    assert v4.time_change > 0  # the slower branch
    assert by_id[runs["v2_wrong"].run_id].time_change is None  # no time: no change
    assert by_id[runs["v6_suspect"].run_id].summary["roofline_verdict"] == "suspect"
    data = v5.to_json()
    assert data["parent"] == runs["v3"].run_id and data["depth"] == 2
    assert data["roofline_verdict"] == "at-roofline" and data["pct_of_roofline"] > 90


def test_a_parent_outside_the_window_is_fetched(recorded):
    store, runs = recorded
    newest = store.history("matmul", limit=1)
    (entry,) = entries_for(newest, lookup_in(store))
    assert entry.parent.run_id == runs["v5"].run_id and entry.depth == 3  # v5, v3, v1


def test_changes_are_only_between_comparable_runs(recorded):
    store, runs = recorded
    elsewhere = record_run(store, "/ws/versions/v7.py", [150.0, 1200.0, 260.0],
                           started_at="2026-12-01T10:30:00+00:00",
                           parent=runs["v5"].run_id, device="NVIDIA H100 80GB HBM3")
    assert time_change(elsewhere, runs["v5"]) is None  # another device
    assert time_change(runs["v5"], None) is None


def test_lineage_walks_back_to_the_root(recorded):
    store, runs = recorded
    chain = krung.lineage(runs["v6_suspect"].run_id[:5], store=store)
    assert [r.run_id for r in chain] == [runs[k].run_id for k in ("v6_suspect", "v5", "v3",
                                                                  "v1")]
    assert [r.run_id for r in krung.lineage(runs["v1"].run_id, store=store)] == \
        [runs["v1"].run_id]


def test_best_by_a_stated_rule(recorded):
    store, runs = recorded
    history = store.history("matmul")
    run, rule, among = best(history)
    # v6 is faster but its time is suspect: its roofline rung failed, so it is not passing
    assert run.run_id == runs["v5"].run_id and among == 4
    assert rule == "lowest geomean of bench-case medians among passing runs on NVIDIA H200"
    run, rule, _ = best(history, "roofline")
    assert run.run_id == runs["v5"].run_id
    assert rule.startswith("highest geomean % of the roofline")
    with pytest.raises(krung.UsageError, match="unknown rule"):
        best(history, "luck")
    assert best([runs["v2_wrong"]]) is None


def test_best_compares_only_runs_on_the_newest_device(recorded):
    store, _ = recorded
    record_run(store, "/ws/versions/h100.py", [900.0, 7000.0, 1600.0],
               started_at="2026-12-02T09:00:00+00:00", device="NVIDIA H100 80GB HBM3")
    entry, rule, among = krung.best_run("matmul", store=store)
    assert entry.run.solution == "/ws/versions/h100.py" and among == 1  # H100 runs only
    assert rule.endswith("on NVIDIA H100 80GB HBM3")


def test_history_and_best_commands_on_recorded_runs(krung, recorded, store):
    db, runs = recorded
    assert db.path == store  # the fixture's store is the one the command reads
    shown = krung("history", "matmul")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1].split() == ["run", "started", "version", "verdict", "time", "(geomean)",
                                "speedup", "roofline", "parent", "vs", "parent", "device"]
    v5 = next(line for line in lines if line.startswith(runs["v5"].run_id))
    assert "93% at" in v5 and runs["v3"].run_id in v5 and "-54.0%" in v5
    v6 = next(line for line in lines if line.startswith(runs["v6_suspect"].run_id))
    assert "failed (roofline)" in v6 and "suspect" in v6
    data = krung("history", "matmul", "--json").json()
    assert {d["run_id"]: d["parent"] for d in data}[runs["v4_slower"].run_id] == \
        runs["v3"].run_id
    assert all({"time_change", "depth", "pct_of_roofline", "roofline_verdict"} <= set(d)
               for d in data)
    chosen = krung("best", "matmul", "--by", "roofline", "--json").json()
    assert chosen["run_id"] == runs["v5"].run_id
    assert chosen["rule"].startswith("highest geomean % of the roofline")
    text = krung("best", "matmul")
    assert text.stdout.startswith("rule: lowest geomean of bench-case medians among passing "
                                  f"runs on {H200}")
    wrong = krung("best", "matmul", "--by", "luck")
    assert wrong.code == 2 and "unknown rule 'luck'" in wrong.stderr


def test_real_runs_link_to_the_previous_run_of_the_same_file(krung, scale_problem, version):
    good = version("good", GOOD)
    rungs = "static"  # parents link runs, whatever rungs they climbed
    first = krung("run", scale_problem, good, "--rungs", rungs, "--json")
    assert first.code == 0, first.stderr
    assert first.json()["parent"] is None
    second = krung("run", scale_problem, good, "--rungs", rungs, "--json").json()
    assert second["parent"] == first.json()["run_id"]  # the same file: its previous run
    other = krung("run", scale_problem, version("faster", FASTER), "--rungs", rungs,
                  "--parent", second["run_id"][:6], "--json").json()
    assert other["parent"] == second["run_id"]  # named by a prefix
    fresh = krung("run", scale_problem, version("fresh", FASTER), "--rungs", rungs, "--json")
    assert fresh.json()["parent"] is None  # a new file starts a new root

    shown = krung("show", other["run_id"])
    assert f"parent {second['run_id']}" in shown.stdout.splitlines()[1]
    history = krung("history", "scale", "--json").json()
    assert [h["depth"] for h in history] == [0, 2, 1, 0]  # fresh, other, second, first

    unknown = krung("run", scale_problem, good, "--rungs", "static", "--parent", "ffffffff")
    assert unknown.code == 2 and "no run 'ffffffff'" in unknown.stderr
    elsewhere = scale_problem.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "problem.py").write_text((scale_problem / "problem.py").read_text())
    crossed = krung("run", elsewhere, good, "--rungs", "static", "--parent",
                    first.json()["run_id"])
    assert crossed.code == 2
    assert "is of problem scale, not elsewhere" in crossed.stderr
    assert "hint: name a run of elsewhere" in crossed.stderr


def _unfinished(store: Store, like: str, started_at: str) -> krung.Run:
    """A run the store began and never finished (in flight, or killed), of the problem and
    version of the run `like`."""
    done = store.get(like)
    run = krung.Run(run_id="", problem=done.problem, problem_path=done.problem_path,
                    solution=done.solution,
                    source_sha256="ab" * 32, source="def kernel(x):\n    return x\n",
                    started_at=started_at)
    store.begin(run, ["static", "correctness"])
    return run


def test_a_run_in_flight_is_running_and_never_an_implicit_parent(krung, scale_problem, version,
                                                                 store):
    from datetime import datetime, timedelta, timezone

    from krung.host.history_tree import unfinished_state

    good = version("good", GOOD)
    rungs = "static,compile,run,correctness"
    first = krung("run", scale_problem, good, "--rungs", rungs, "--json").json()
    db = Store(store)
    now = datetime.now(timezone.utc)
    in_flight = _unfinished(db, first["run_id"], (now - timedelta(minutes=3)).isoformat())
    killed = _unfinished(db, first["run_id"], (now - timedelta(days=2)).isoformat())
    # the parent lookup skips both: the newest finished run of the file is the first
    assert db.previous_run("scale", str(good)) == first["run_id"]
    db.close()
    second = krung("run", scale_problem, good, "--rungs", rungs, "--json").json()
    assert second["parent"] == first["run_id"]

    history = {h["run_id"]: h for h in krung("history", "scale", "--json").json()}
    assert history[in_flight.run_id]["verdict"] == "running"
    assert history[killed.run_id]["verdict"] == "abandoned"
    assert history[second["run_id"]]["verdict"] == "ok"
    table = krung("history", "scale").stdout
    line = next(t for t in table.splitlines() if t.startswith(in_flight.run_id))
    assert "running" in line and "error" not in line
    assert "abandoned" in next(t for t in table.splitlines() if t.startswith(killed.run_id))
    # the rule itself: a finish time, or how long ago it started
    assert unfinished_state(krung_run(finished_at="2026-12-01T10:00:00+00:00")) is None
    started = krung_run(started_at="2026-12-01T10:00:00+00:00")
    assert unfinished_state(started, now=datetime(2026, 12, 1, 20, tzinfo=timezone.utc)) == \
        "running"
    assert unfinished_state(started, now=datetime(2026, 12, 2, 10, 1, tzinfo=timezone.utc)) \
        == "abandoned"


def krung_run(**fields) -> krung.Run:
    return krung.Run(run_id="r", problem="p", problem_path="/p", solution="/v.py",
                     source_sha256="0" * 64, **fields)
