"""The judge fork server (krung.judge.forks): CPU judges forked from a process that imported
torch once, where a cold start would make the same judge; started cold elsewhere."""

from __future__ import annotations

from tests.conftest import GOOD

QUICK = "static,compile,run,correctness"


def test_a_judge_is_forked_where_the_environment_is_the_servers(krung, scale_problem,
                                                                 version):
    good = version("good", GOOD)
    forked = krung("run", scale_problem, good, "--rungs", QUICK, "--json").json()
    assert forked["outcome"] == "passed" and forked["env"]["judge"] == "forked"
    # A variable Python or torch may read at import: a forked judge would not see it.
    cold = krung("run", scale_problem, good, "--rungs", QUICK, "--json",
                 env={"MALLOC_ARENA_MAX": "2"}).json()
    assert cold["outcome"] == "passed" and cold["env"]["judge"] == "cold"
    off = krung("run", scale_problem, good, "--rungs", QUICK, "--json",
                env={"KRUNG_JUDGE_FORKS": ""}).json()
    assert off["outcome"] == "passed" and off["env"]["judge"] == "cold"
