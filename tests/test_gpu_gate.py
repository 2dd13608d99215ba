"""The GPU gate's own counting (scripts/gpu_gate.py), on a CPU: a chunk of tests is run by a
real pytest and counted test by test from its verbose output, whatever each one's outcome;
a test the gate's limit cut short is not finished, and `--rest` runs just those."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO


def _gate():
    spec = importlib.util.spec_from_file_location("gpu_gate", REPO / "scripts" / "gpu_gate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_outcome_of_a_chunk_is_counted_expected_failures_and_skips_with_reasons(tmp_path):
    """pytest -v writes `XFAIL (reason)` and `SKIPPED (reason)`: they count as passed and
    skipped, an unexpected pass as failed, and no test goes uncounted; what a passed test
    printed (a GPU test's figures) is in the log."""
    gate = _gate()
    n = random.randint(2, 5)
    figure = random.uniform(1, 99)
    (tmp_path / "test_chunk.py").write_text(textwrap.dedent(f"""
        import pytest

        @pytest.mark.parametrize("i", range({n}))
        def test_passes(i):
            print(f"figure {{i}}: {figure!r}")
            assert i >= 0

        @pytest.mark.xfail(reason="known (a reason with (parentheses))")
        def test_expected_to_fail():
            assert False

        @pytest.mark.xfail(reason="no longer")
        def test_passes_unexpectedly():
            assert True

        @pytest.mark.skip(reason="needs a CUDA GPU (none here)")
        def test_skipped():
            pass

        def test_fails():
            assert False
    """))
    nodes = [str(tmp_path / "test_chunk.py")]
    counted = gate.run_tests(nodes, 0, tmp_path, limit_s=120)
    assert (counted["passed"], counted["skipped"], counted["failed"]) == (n + 1, 1, 2), counted
    assert any("test_fails" in f for f in counted["failures"]), counted
    log = (tmp_path / "tests00.log").read_text()
    assert all(f"figure {i}: {figure!r}" in log for i in range(n)), log


def _chunk(folder, name, passing, fails=False, hangs=False, after=0):
    """A test file: `passing` tests, then one that fails, one that runs past any limit and
    `after` more, as asked; its nodes in order, as the gate names them."""
    tests = {f"test_passes_{i}": f"assert {i} >= 0" for i in range(passing)}
    tests |= {"test_fails": "assert False"} if fails else {}
    tests |= {"test_runs_past_the_limit": "time.sleep(600)"} if hangs else {}
    tests |= {f"test_after_{i}": "pass" for i in range(after)}
    (folder / f"{name}.py").write_text("import time\n" + "".join(
        f"\n\ndef {test}():\n    {body}\n" for test, body in tests.items()))
    return [f"{folder / name}.py::{test}" for test in tests]


NO_SUITE = {"problems": 0, "per_min": 0.0, "crashes": 0, "why": "not asked for"}


def _rest(out):
    return [line for line in (out / "gate-rest.txt").read_text().splitlines()
            if not line.startswith("#")]


def test_a_chunk_killed_at_the_limit_leaves_its_running_test_and_those_after_not_finished(
        tmp_path):
    """The gate's limit cut a chunk short: what passed before counts, the running test and
    the ones after it are not finished (not failed), named in gate-rest.txt, and the gate
    does not pass."""
    gate = _gate()
    passing, after = random.randint(1, 4), random.randint(0, 3)
    nodes = _chunk(tmp_path, "test_killed", passing, hangs=True, after=after)
    counted = gate.run_tests(nodes, 7, tmp_path, limit_s=6)
    assert counted["not_finished"] == nodes[passing:], counted
    assert (counted["passed"], counted["failed"], counted["failures"]) == (passing, 0, [])
    assert "chunk 7 killed at the gate's limit" in (tmp_path / "tests07.log").read_text()

    record = tmp_path / "GPU_GATE.md"
    assert not gate.report([], [counted], NO_SUITE, tmp_path, 6.0, ["tests"], record=record)
    assert record.read_text().rstrip().endswith(
        f"gpu gate: {passing} passed, 0 failed, {after + 1} not finished")
    assert _rest(tmp_path) == nodes[passing:]
    said = (tmp_path / "gate.txt").read_text()
    assert all(f"tests00 NOT FINISHED {node} (killed" in said for node in nodes[passing:])


def test_a_failed_test_still_fails_and_a_chunk_out_of_time_is_not_finished(tmp_path):
    """A test that failed is failed, beside tests the gate's time never started (not
    finished); a gate with neither passes and leaves no gate-rest.txt behind."""
    gate = _gate()
    passing, late = random.randint(1, 3), random.randint(1, 4)
    failing = gate.run_tests(_chunk(tmp_path, "test_fails", passing, fails=True), 0,
                             tmp_path, limit_s=60)
    never = _chunk(tmp_path, "test_late", late)
    unstarted = gate.run_tests(never, 1, tmp_path, limit_s=0)
    assert (failing["passed"], failing["failed"], failing["not_finished"]) == (passing, 1, [])
    assert any("test_fails" in f for f in failing["failures"]), failing
    assert (unstarted["failed"], unstarted["not_finished"]) == (0, never)

    record = tmp_path / "GPU_GATE.md"
    assert not gate.report([], [failing, unstarted], NO_SUITE, tmp_path, 1.0, ["tests"],
                           record=record)
    assert record.read_text().rstrip().endswith(
        f"gpu gate: {passing} passed, 1 failed, {late} not finished")
    assert _rest(tmp_path) == never  # the failed one is not the rest's to run again

    passes = gate.run_tests(_chunk(tmp_path, "test_passes", passing), 2, tmp_path, 60)
    assert gate.report([], [passes], NO_SUITE, tmp_path, 1.0, ["tests"], record=record)
    assert not (tmp_path / "gate-rest.txt").exists()


def test_pytests_durations_are_learned_and_the_longest_chunks_start_first(tmp_path):
    """Each test's seconds from pytest's --durations lines (as a gate's tests.log holds
    them), learned into a table; by it, the chunks start the longest first, Nsight
    Compute's still before all, a test the table does not know at its file's mean."""
    gate = _gate()
    sleeps = random.sample([0.05, 0.3, 0.55, 0.8], 4)
    for i, s in enumerate(sleeps):
        (tmp_path / f"test_f{i}.py").write_text(
            f"import time\n\n\ndef test_sleeps():\n    time.sleep({s})\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
                           "--durations=0", "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    log = tmp_path / "tests.log"
    log.write_text(f"===== tests00.log\n{done.stdout}\n===== tests01.log\n(killed)\n")
    table = tmp_path / "durations.json"
    table.write_text(json.dumps({"test_old.py::test_kept": 12.5}))
    learned = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_gate.py"),
                              "--learn-durations", str(log), "--durations", str(table)],
                             capture_output=True, text=True, timeout=60)
    assert learned.returncode == 0, learned.stderr
    durations = json.loads(table.read_text())
    assert durations == {**gate.parse_durations(done.stdout), "test_old.py::test_kept": 12.5}
    nodes = [f"test_f{i}.py::test_sleeps" for i in range(len(sleeps))]
    assert all(durations[n] >= s for n, s in zip(nodes, sleeps, strict=True)), durations

    ncu = random.choice(nodes)
    new = "test_old.py::test_new"  # its file's mean: 12.5 s, before all the sleeps
    chunks = gate.chunked([*nodes, new], [ncu], durations)
    by_sleep = [n for _, n in sorted(zip(sleeps, nodes, strict=True), reverse=True)]
    assert chunks == [[ncu], [new], *[[n] for n in by_sleep if n != ncu]], chunks
    assert gate.seconds("test_unknown.py::test_x", durations) == gate.UNKNOWN_S


def test_the_committed_durations_are_of_the_gates_own_tests():
    gate = _gate()
    durations = gate.read_durations(gate.DURATIONS)
    assert durations and all(s > 0 for s in durations.values())
    assert {n.split("::")[0] for n in durations} <= set(gate.TEST_FILES)


def test_rest_runs_exactly_the_nodes_of_its_file_and_records_its_line(tmp_path):
    """`--rest FILE` runs the nodes a gate left, no others, with the whole limit: its own
    line (a failed one still fails, one killed again is not finished and named for the next
    rest) in GPU_GATE.md and GPU_GATE.line; a rest file of another commit is refused."""
    gate = _gate()
    passing = random.randint(1, 4)
    listed = _chunk(tmp_path, "test_rest", passing, fails=True)
    (tmp_path / "test_rest.py").write_text((tmp_path / "test_rest.py").read_text()
                                           + "\n\ndef test_not_listed():\n    assert False\n")
    hangs = _chunk(tmp_path, "test_hangs", 0, hangs=True)
    rest = tmp_path / "gate-rest.txt"
    rest.write_text(f"# commit: {gate._commit()}\n" + "\n".join([*listed, *hangs]) + "\n")
    out, record = tmp_path / "out", tmp_path / "GPU_GATE.md"
    command = [sys.executable, str(REPO / "scripts" / "gpu_gate.py"), "--rest", str(rest),
               "--device", "cpu", "--limit", "8", "--out", str(out), "--record", str(record)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    line = f"gpu gate rest: {passing} passed, 1 failed, 1 not finished"
    assert done.returncode == 1 and done.stdout.rstrip().endswith(line), done.stdout
    assert record.read_text().rstrip().endswith(line)
    assert (out / "GPU_GATE.line").read_text().rstrip().endswith(line)
    assert _rest(out) == hangs
    assert "test_not_listed" not in (out / "tests.log").read_text()

    rest.write_text("# commit: 0000000\n" + "\n".join(listed) + "\n")
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "the rest of the gate at 0000000" in refused.stderr


def test_a_rest_file_names_its_commit_by_the_full_hash_or_the_short():
    gate = _gate()
    full = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=REPO, check=True).stdout.strip()
    cut = random.randint(7, 39)
    assert gate.same_commit(full, full[:cut]) and gate.same_commit(full[:cut], full)
    other = f"{(int(full[0], 16) + 1) % 16:x}{full[1:cut]}"
    assert not gate.same_commit(full, other) and not gate.same_commit(full, full[:6])


def test_corpus_runs_the_clock_left_are_not_finished_and_the_rest_runs_them(tmp_path):
    """A corpus run the gate's time never started is not finished (not failed), named in
    gate-rest.txt by its mode, expectation and paths from the repository; `--rest` runs it,
    here on the CPU, and counts it as the gate would have."""
    gate = _gate()
    versions = gate.corpus(50)
    problem, version, passes = random.choice(
        [v for v in versions if not v[2] and "kernelbench" in v[0]])  # a quick refusal
    mode = "cold"
    left = {"problem": Path(problem).name, "version": Path(version).name, "mode": mode,
            "as_expected": False, "crash": False, "skipped": "out of the gate's time",
            "not_finished": gate.corpus_line((problem, version, passes, mode))}
    ran = {"problem": "p", "version": "v.py", "mode": "warm", "as_expected": True,
           "crash": False, "wall_s": 1.0}
    record = tmp_path / "GPU_GATE.md"
    assert not gate.report([left, ran], [], NO_SUITE, tmp_path, 1.0, ["corpus"],
                           record=record)
    assert record.read_text().rstrip().endswith(
        "gpu gate: 1 passed, 0 failed, 1 not finished, 0 krung crashes")
    assert _rest(tmp_path) == [f"corpus cold fail {Path(problem).relative_to(REPO)} "
                               f"{Path(version).relative_to(REPO)}"]
    assert gate.corpus_job(_rest(tmp_path)[0]) == (problem, version, passes, mode)

    rest = tmp_path / "gate-rest.txt"
    out = tmp_path / "out"
    temp = tmp_path / "temp"  # the gate's, its runs' and their workers' temp folder
    temp.mkdir()
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_gate.py"), "--rest",
                           str(rest), "--device", "cpu", "--limit", "120", "--out", str(out),
                           "--record", str(record)], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "TMPDIR": str(temp)})
    line = "gpu gate rest: 1 passed, 0 failed, 0 not finished, 0 krung crashes"
    assert done.returncode == 0 and done.stdout.rstrip().endswith(line), done.stdout
    assert not (out / "gate-rest.txt").exists()
    assert not list(temp.glob("krung-gate-*")) and not list(temp.glob("krung-worker-*"))
    # where the run's time went: in its rungs, and the judge's steps before them
    row = json.loads((out / "corpus.jsonl").read_text())
    assert 0 < row["in_rungs_s"] < row["wall_s"]
    assert set(row["before_rungs_s"]) == {"version_read", "device", "problem_load",
                                          "problem_setup", "behaviour_check"}
    assert "before the rungs (median s) version_read" in (out / "gate.txt").read_text()


def test_where_a_modes_time_went_is_the_median_of_its_runs_in_and_outside_the_rungs():
    gate = _gate()
    walls = [round(random.uniform(5, 40), 1) for _ in range(5)]
    inside = [round(w * random.uniform(0.2, 0.8), 1) for w in walls]
    loads = [round(random.uniform(0.1, 3), 2) for _ in walls]
    rows = [{"wall_s": w, "in_rungs_s": i, "before_rungs_s": {"problem_load": load}}
            for w, i, load in zip(walls, inside, loads, strict=True)]
    rows.append({"skipped": "the gate failed on it"})  # no time: not counted
    outside = sorted(w - i for w, i in zip(walls, inside, strict=True))[2]
    assert gate.where_time_went(rows) == (
        f"median {sorted(walls)[2]:g} s, max {max(walls):g} s; in the rungs median "
        f"{sorted(inside)[2]:.1f} s, outside them {outside:.1f} s; "
        f"before the rungs (median s) problem_load {sorted(loads)[2]:.2f}")
    hung = random.randint(200, 300)  # killed: no rungs told, so none of it counted outside
    assert gate.where_time_went([{"wall_s": hung}]) == f"median {hung} s, max {hung} s"


def test_a_suites_waits_are_read_from_its_service_log_and_its_runs(tmp_path):
    """What the gate tells beside the suite's figure, from a real `krung suite` through its
    service (here on the CPU): a judge per run handed out, ready or still starting, and the
    median of each step the judges took before the first rung."""
    from tests.conftest import KERNELBENCH, krung_command

    names = random.sample(["1_ReLU", "3_Linear", "4_LayerNorm"], 2)
    for folder, source in (("problems", KERNELBENCH), ("baselines", KERNELBENCH / "solutions")):
        (tmp_path / folder).mkdir()
        for name in names:
            (tmp_path / folder / f"{name}.py").write_text((source / f"{name}.py").read_text())
    krung = krung_command(tmp_path / "krung.db", tmp_path)
    done = krung("suite", tmp_path / "problems", "--solutions", tmp_path / "baselines",
                 "--rungs", "static,compile,run,correctness", "--json", timeout=300,
                 env={"KRUNG_SERVICE": "on"})  # on two cores a suite starts none unasked
    assert done.code == 0, done.stderr
    empty = tmp_path / "no_suite"  # a suite that recorded nothing: nothing told, no error
    empty.mkdir()
    assert _gate().suite_waits(empty) == {"judges_ready": 0, "judges_starting": 0,
                                          "before_rungs_median_s": {}}
    assert not (empty / "krung.db").exists()
    waits = _gate().suite_waits(tmp_path)
    assert waits["judges_ready"] + waits["judges_starting"] == 2, waits
    assert set(waits["before_rungs_median_s"]) == {"version_read", "device", "problem_load",
                                                   "problem_setup", "behaviour_check"}
    assert all(s >= 0 for s in waits["before_rungs_median_s"].values())
