"""The ladder (krung.judge.ladder): which rungs a spec selects, how rungs are found from their
declarations, climb's skip rules, and run_rung turning whatever a rung does into a result.
Rungs of one's own in temporary files stand in for the built-in ones: real modules, found
the way KRUNG_EXTRA_RUNGS finds them."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest
import torch

from krung.judge import ladder
from krung.judge.ladder import (
    DEFAULT_LADDER,
    RUNGS,
    Context,
    RungSkipped,
    climb,
    derive_seed,
    discover,
    failure,
    poison_leaves,
    run_rung,
    select,
)
from krung.protocol.errors import RungFailed, UsageError
from krung.protocol.results import Status
from krung.protocol.settings import Settings

HEAD = """
from krung.judge.ladder import RungSkipped
from krung.judge.rungs.spec import Figure, RungSpec
from krung.protocol.errors import RungFailed
"""


@pytest.fixture
def rungs(tmp_path, monkeypatch):
    """Write rung modules (name -> the rest of the module after HEAD) and make them known to
    the ladder as KRUNG_EXTRA_RUNGS would; the ladder forgets them afterwards."""
    written: list[str] = []

    def install(**bodies: str) -> None:
        for name, body in bodies.items():
            (tmp_path / f"{name}.py").write_text(HEAD + textwrap.dedent(body))
            written.append(name)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("KRUNG_EXTRA_RUNGS", ",".join(written))
        ladder._rungs.cache_clear()

    yield install
    ladder._rungs.cache_clear()
    for name in written:
        sys.modules.pop(name, None)


def rung(name: str, order: float, needs: tuple[str, ...] = (), does: str = "return {}") -> str:
    return (f"SPEC = RungSpec({name!r}, order={order}, needs={needs!r}, checks='a test')\n\n"
            f"def run(ctx):\n    {does}\n")


def context(tmp_path) -> Context:
    # The rungs under test read nothing of the problem or the version.
    return Context(problem=None, solution=None, device="cpu", candidate=None,  # type: ignore[arg-type]
                   settings=Settings(), seed=derive_seed(12345, "test"), run_dir=tmp_path)


def test_select_names_rungs_in_ladder_order():
    assert select(None) == select("") == select([]) == select(" , ") == list(DEFAULT_LADDER)
    assert select("trace, static") == ["static", "trace"]
    assert select(["roofline", "run"]) == ["run", "roofline"]
    added = select("+profile,+trace")
    assert added == [*DEFAULT_LADDER[:-1], "profile", "roofline", "trace"]
    assert set(RUNGS) == set(added) and list(RUNGS) == added


def test_select_refuses_what_it_cannot_climb():
    with pytest.raises(UsageError, match="mix added rungs") as mixed:
        select("static,+profile")
    assert "+profile,+trace" in (mixed.value.hint or "")
    with pytest.raises(UsageError, match=r"unknown rung\(s\): speed, fast$") as unknown:
        select("static,speed,fast")
    with pytest.raises(UsageError, match=r"unknown rung\(s\): fast"):
        select("+fast")
    assert "choose from: static,compile," in (unknown.value.hint or "")


def test_a_rung_of_ones_own_joins_the_ladder_in_its_order(rungs):
    rungs(lad_early=rung("lad_early", 15, ("static",)),
          lad_asked=rung("lad_asked", 95).replace("checks='a test'",
                                                  "checks='a test', on_request=True"))
    assert ladder.RUNGS[:3] == ("static", "lad_early", "compile")
    assert ladder.RUNGS[-2:] == ("lad_asked", "trace")
    assert "lad_early" in ladder.DEFAULT_LADDER and "lad_asked" in ladder.ON_REQUEST
    assert select("+lad_asked")[-2:] == ["roofline", "lad_asked"]
    assert ladder.rung_module("lad_early").SPEC.needs == ("static",)


@pytest.mark.parametrize("body, words", [
    (rung("static", 5), "two modules declare the rung static"),
    ("def run(ctx):\n    return {}\n", "is no rung: it needs `SPEC = RungSpec(...)`"),
    (rung("lad_lost", 5, ("warp_speed",)), "needs unknown rung(s) warp_speed"),
    ("SPEC = RungSpec('lad_idle', order=5, checks='nothing')\n", "and `def run(ctx)`"),
])
def test_a_rung_that_does_not_fit_is_refused_with_the_fix(tmp_path, monkeypatch, body, words):
    name = f"lad_bad_{abs(hash(words)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(HEAD + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(UsageError) as refused:
            discover(name)
    finally:
        sys.modules.pop(name, None)
    assert words in refused.value.message and refused.value.hint
    with pytest.raises(UsageError, match="names lad_nowhere, which does not import") as missing:
        discover("lad_nowhere")
    assert "PYTHONPATH" in (missing.value.hint or "")


def test_climb_skips_a_rung_whose_need_did_not_pass_and_says_the_root_cause_once(rungs,
                                                                                  tmp_path):
    rungs(lad_gone=rung("lad_gone", 11, does="raise RungSkipped('no widget here')"),
          lad_after=rung("lad_after", 12, ("lad_gone",)),
          lad_later=rung("lad_later", 13, ("lad_after",)),
          lad_broken=rung("lad_broken", 14, does="raise RungFailed('Broken', 'it broke', "
                                                  "'fix it', figures={'parts': 3})"),
          lad_child=rung("lad_child", 15, ("lad_broken",)),
          # needs a rung that is not climbed: that does not block it
          lad_free=rung("lad_free", 16, ("run",), does="return {'ran': True}"))
    names = ["lad_gone", "lad_after", "lad_later", "lad_broken", "lad_child", "lad_free"]
    started, emitted = [], []
    ctx = context(tmp_path)
    climb(ctx, names, emitted.append, started.append)
    assert started == names == [r.name for r in emitted]
    got = {r.name: r for r in emitted}
    assert (got["lad_gone"].status, got["lad_gone"].reason) == (Status.SKIPPED,
                                                                "no widget here")
    assert got["lad_after"].reason == "needs lad_gone, which skipped (no widget here)"
    assert got["lad_later"].reason == "needs lad_after, which skipped"
    assert got["lad_broken"].status is Status.FAILED
    assert got["lad_broken"].figures == {"parts": 3}
    assert got["lad_child"].reason == "needs lad_broken, which failed"
    assert got["lad_free"].ok and got["lad_free"].figures == {"ran": True}
    assert ctx.results == got


def test_run_rung_turns_every_outcome_into_a_result(tmp_path):
    ctx = context(tmp_path)
    figures = {"x": torch.rand(1).item()}

    def sleeps(_: Context) -> dict:
        time.sleep(0.05)
        return figures

    ok = run_rung("r", sleeps, ctx)
    assert ok.status is Status.OK and ok.figures == figures and ok.duration_s >= 0.05

    def skips(_: Context) -> dict:
        raise RungSkipped("needs a GPU")

    skipped = run_rung("r", skips, ctx)
    assert (skipped.status, skipped.reason, skipped.error) == (Status.SKIPPED, "needs a GPU",
                                                              None)

    def fails(_: Context) -> dict:
        raise RungFailed("Mismatch", "2/3 cases fail", "compare the sizes", location="v.py:3",
                         details="  3 | y = x", figures={"passed": 1})

    failed = run_rung("r", fails, ctx)
    assert failed.status is Status.FAILED
    assert (failed.error, failed.error_type, failed.hint, failed.location, failed.details,
            failed.figures) == ("Mismatch: 2/3 cases fail", "Mismatch", "compare the sizes",
                                "v.py:3", "  3 | y = x", {"passed": 1})

    def breaks(_: Context) -> dict:
        return {}["missing"]

    broken = run_rung("r", breaks, ctx)
    assert broken.status is Status.FAILED and broken.error_type == "InternalError"
    assert broken.error == "KeyError: 'missing'"
    assert "not from the version" in (broken.hint or "")
    assert "Traceback" in (broken.details or "") and "breaks" in (broken.details or "")


def test_each_rung_starts_with_the_cache_the_rungs_before_left_handed_back(tmp_path,
                                                                        monkeypatch):
    """At declared sizes the run rung's dead blocks (about six copies of an input) counted
    beside correctness's first draws: every rung hands torch's cache back before it starts,
    a rung that skips or fails as well (on a CPU it is a no-op: the order is what is pinned)."""
    ctx = context(tmp_path)
    events: list[str] = []
    monkeypatch.setattr(ctx, "release_cache", lambda: events.append("released"))

    def records(_: Context) -> dict:
        events.append("ran")
        raise RungSkipped("nothing to do")

    for _ in range(2):
        run_rung("r", records, ctx)
    assert events == ["released", "ran"] * 2


def test_a_workers_error_record_becomes_a_rung_failure():
    made = failure({"type": "ZeroDivisionError", "message": "division by zero",
                    "hint": "check the divisor", "location": "v.py:9", "details": "  9 | 1/0"},
                   "case n=3")
    assert (made.error_type, made.message, made.hint, made.location, made.details) == (
        "ZeroDivisionError", "division by zero (in case n=3)", "check the divisor", "v.py:9",
        "  9 | 1/0")
    bare = failure({}, "the import")
    assert (bare.error_type, bare.message) == ("Error", " (in the import)")


def test_seeds_are_derived_apart_and_reproducibly():
    secret = torch.randint(0, 2**62, (1,)).item()
    seeds = {derive_seed(secret, purpose, *parts)
             for purpose, parts in [("correctness", (0, 0)), ("correctness", (0, 1)),
                                    ("correctness", (1, 0)), ("benchmark", (0, 0))]}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(secret, "run", 0) == derive_seed(secret, "run", 0)
    assert derive_seed(secret, "run", 0) != derive_seed(secret + 1, "run", 0)


def test_poison_fills_the_output_buffers_and_shares_the_rest():
    a, out, b = torch.randn(37), torch.randn(5, 3), torch.randn(4)
    poisoned = poison_leaves((a, [out, b]), {1}, 0xFF)
    assert poisoned[0] is a and poisoned[1][1] is b  # shared, not copied
    assert poisoned[1][0] is not out and torch.isnan(poisoned[1][0]).all()
    assert poisoned[1][0].shape == out.shape and not torch.isnan(out).any()
    assert poison_leaves((a,), set(), 0xFF)[0] is a
