"""krung's own failure is krung's: a judge that dies mid-evaluation (a real SIGSEGV, raised by
the judge's own process) is followed by a second try in fresh processes; a second death is
`outcome: error` and exit 3, never a verdict on the version."""

from __future__ import annotations

import pytest

from tests.conftest import GOOD, SCALE_PROBLEM, write

RUNGS = "static,compile,run,correctness"
# The reference runs in the judge: on the 1000-element case (the correctness rung, after
# the problem's own checks on the smallest case) it kills the judge with SIGSEGV, every
# time or only while a marker file beside the problem is missing.
CRASHING_REFERENCE = '''
    import os, signal
    from pathlib import Path

    _MARK = Path(__file__).with_name("crashed")

    def reference(x):
        if x.numel() == 1000 and (ALWAYS or not _MARK.exists()):
            _MARK.touch()
            os.kill(os.getpid(), signal.SIGSEGV)
        return x * 2 + 1
'''


def _crashing_problem(tmp_path, always: bool):
    source = SCALE_PROBLEM.replace('''
    def reference(x):
        return x * 2 + 1
''', CRASHING_REFERENCE.replace("ALWAYS", str(always)))
    return write(tmp_path / "crashing" / "problem.py", source).parent


@pytest.mark.parametrize("always", [False, True], ids=["once", "twice"])
def test_a_judge_killed_by_sigsegv_is_tried_again_then_reported_as_krungs(
        krung, tmp_path, version, always):
    problem = _crashing_problem(tmp_path, always)
    result = krung("run", problem, version("good", GOOD), "--rungs", RUNGS, "--json",
                   env={"KRUNG_SERVICE": "off"})
    run = result.json()
    first = run["env"]["first_try"]
    assert first["error"].startswith("the judge process exited with status -11"), first
    assert first["rungs_done"][:3] == ["static", "compile", "run"]
    run_dir = tmp_path / "store" / "runs" / run["run_id"]
    assert "Segmentation fault" in (run_dir / "judge.1.log").read_text()
    if always:
        assert result.code == 3 and run["outcome"] == "error" and not run["ok"], result.stderr
        assert "status -11" in run["error"]
        text = krung("show", run["run_id"])
        assert "krung failed, not your version" in text.stdout
    else:
        assert result.code == 0 and run["outcome"] == "passed", result.stderr
        assert [r["name"] for r in run["rungs"]] == RUNGS.split(",")  # the second try's
        assert all(r["status"] == "ok" for r in run["rungs"])
        assert run["error"] is None and run["env"]["judge"] == "cold"


def test_the_progress_of_a_second_try_says_what_failed_first(tmp_path, version, monkeypatch):
    """A suite's progress lines are where a judge failing first shows (the summary counts
    only the second try): they say what failed, so memory is told from a crash."""
    import krung

    monkeypatch.setenv("KRUNG_SERVICE", "off")
    said: list[tuple[str, str]] = []
    run = krung.evaluate(_crashing_problem(tmp_path, always=False), version("good", GOOD),
                         rungs=RUNGS, device="cpu", store=tmp_path / "store" / "krung.db",
                         on_progress=lambda rung, message: said.append((rung, message)))
    assert run.ok
    told = [message for rung, message in said if rung == "krung"]
    assert len(told) == 1 and told[0].startswith(
        "krung's judge failed, not the version (the judge process exited with status -11"), said


def test_a_rung_whose_judge_code_raises_is_krungs_error_not_the_versions(krung, tmp_path,
                                                                          version):
    """An exception of the judge's own (krung's or the problem's code: here the reference
    on one case, as one running out of GPU memory would) is InternalError in that rung: not
    a verdict, so tried again, then `outcome: error`."""
    source = SCALE_PROBLEM.replace('''
    def reference(x):
        return x * 2 + 1
''', '''
    def reference(x):
        if x.numel() == 1000:
            raise RuntimeError("out of memory (the problem's reference, on purpose)")
        return x * 2 + 1
''')
    problem = write(tmp_path / "raising" / "problem.py", source).parent
    result = krung("run", problem, version("good", GOOD), "--rungs", RUNGS, "--json",
                   env={"KRUNG_SERVICE": "off"})
    run = result.json()
    assert result.code == 3 and run["outcome"] == "error", result.stderr
    assert run["error"].startswith("krung failed in the correctness rung, not the version: "
                                   "RuntimeError: out of memory")
    assert run["env"]["first_try"]["error"] == run["error"].splitlines()[0]


def test_a_worker_that_dies_before_any_version_code_runs_is_krungs_error(krung, tmp_path,
                                                                         version):
    """34_InstanceNorm at declared sizes beside two other problems on an 80 GB GPU: its
    worker exited while starting (CUDA's context had no memory left), before it said hello,
    and krung called the version's process crashed. Nothing of the version's runs before
    the hello: krung's error, tried again, then exit 3 (which a suite runs again alone)."""
    import os
    import random

    status = random.randint(1, 120)
    said = f"no memory for a context ({random.randrange(1 << 30)} bytes)"
    # Every worker this run starts ends before it says hello, as a failed CUDA start would.
    site = write(tmp_path / "site" / "sitecustomize.py", f"""
import os, sys
if "krung.worker.serve" in sys.orig_argv:
    print({said!r}, file=sys.stderr, flush=True)
    os._exit({status})
""").parent
    problem = write(tmp_path / "scale" / "problem.py", SCALE_PROBLEM).parent
    result = krung("run", problem, version("good", GOOD), "--rungs", RUNGS, "--json",
                   env={"KRUNG_SERVICE": "off", "KRUNG_FORK_WORKER": "off",
                        "PYTHONPATH": os.pathsep.join(filter(None, [
                            str(site), os.environ.get("PYTHONPATH")]))})
    run = result.json()
    assert result.code == 3 and run["outcome"] == "error", result.stdout + result.stderr
    assert "before any of the version's code ran" in run["error"], run["error"]
    assert f"exited with status {status}" in run["error"] and said in run["error"]
    assert run["env"]["first_try"]["rungs_done"] == ["static", "compile"]
