"""The limiter's rules (krung.judge.rungs.roofline.limiter): every branch with recorded ncu
figures (tests/data/ncu_limiter.json), the case that was not profiled, and no two fired
rules contradicting each other over every combination of the facts they read."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from krung.judge.rungs.roofline import case_figures, limiter
from krung.judge.rungs.roofline.limiter import (
    CONTRADICTIONS,
    RULES,
    Facts,
    ProfileSignals,
    contradictions,
    fired,
    likely_limiter,
)
from krung.judge.rungs.roofline.model import Ceilings, ComputeCeiling, dtype_ceiling, place

FIXTURES = json.loads((Path(__file__).parent / "data" / "ncu_limiter.json").read_text())["cases"]
CEILINGS = Ceilings(dram_bytes_per_s=4.3e12, flops_per_s={"fp32": 51e12, "bf16": 790e12},
                    l2_bytes_per_s=9.6e12, l2_size_bytes=50 * 2**20)
TENSOR_BF16 = ComputeCeiling("bf16", 790e12, "the bf16 tensor-core peak", "SASS: HGMMA x4")


def row_of(name: str, *, case: str | None = None) -> dict:
    """The roofline row of a recorded case: its bench figures and the profile's, placed."""
    fixture = FIXTURES[name]
    label = case or fixture["profile"]["case"]
    compute = TENSOR_BF16 if fixture["compute"] == "bf16" else \
        dtype_ceiling("fp32", CEILINGS, "recorded without its SASS")
    bench = {"case": label, "median_us": fixture["median_us"], **fixture["bench"]}
    row = case_figures(bench, compute.name, float(fixture["flops"]),
                       float(fixture["bytes_moved"]), CEILINGS, 90.0, fixture["profile"],
                       compute=compute)
    return row


@pytest.mark.parametrize("name", list(FIXTURES))
def test_each_recorded_profile_fires_its_rules(name):
    fixture = FIXTURES[name]
    row = row_of(name)
    assert row["verdict"] == "below", row
    rules = [r for r in row["limiter_rules"] if r not in ("assumed_ceiling",)]
    assert rules == fixture["rules"], row["limiter"]
    for text in fixture["says"]:
        assert text in row["limiter"], row["limiter"]
    for text in fixture["never"]:
        assert text not in row["limiter"], row["limiter"]
    assert row["profiled"] is True and row["limiter"].count("first try: ") == 1
    assert row["limiter"].startswith(f"{row['pct']:.0f}% of ")
    assert row["first_try"] and row["limiter"].endswith(row["first_try"])


def test_the_issues_limiter_no_longer_contradicts_its_counters():
    """Issue 22: `80% of DRAM bandwidth ...; profile: memory 67%, compute 77%, occupancy
    85%: the memory system is busy, yet DRAM moves less than the minimum bytes allow: extra
    traffic`. DRAM moved 0.97x the minimum, and compute is the busier: issue-bound."""
    row = row_of("issue_22")
    assert row["pct"] == pytest.approx(80.0, abs=0.5) and row["bound"] == "memory"
    assert row["limiter"].startswith(
        "80% of DRAM bandwidth, 1.2x from the roofline; profile of this case (ncu, "
        "gelu_kernel): memory 67%, compute 77%, DRAM 67%, occupancy 85%, DRAM bytes 0.97x "
        "the minimum, top stalls math_pipe_throttle, long_scoreboard; the SM's pipes are "
        "busier (compute 77%) than memory (67%) although the case's intensity is below the "
        "ridge")
    assert "extra traffic" not in row["limiter"] and row["kernel"] == "gelu_kernel"
    assert row["first_try"].startswith("fewer instructions per element: 16-byte vector loads")


def test_a_case_that_was_not_profiled_says_so_and_reads_its_position():
    row = row_of("extra_traffic", case="rows=128,cols=32768")
    assert row["profiled"] is False and row["kernel"] is None
    assert row["limiter_rules"][:2] == ["position_memory", "not_profiled"]
    assert "memory-bound by its position (0.625 FLOP/B, below the ridge at 11.9), not by " \
           "counters" in row["limiter"]
    assert "not profiled (the profile rung ran on case rows=4096,cols=32768)" in row["limiter"]
    assert "DRAM moved" not in row["limiter"]


def _point(time_us: float, *, work=(2 * 8192**3, 3 * 8192**2 * 2), precision="bf16",
           compute: ComputeCeiling | None = TENSOR_BF16):
    return place(*work, time_us, CEILINGS, precision, compute=compute)


NO_COUNTERS = [
    (Facts(_point(1100.0)), ["suspect"], "faster than the roofline allows"),
    (Facts(_point(1420.0)), ["at_roofline"], "at 98% of the bf16 tensor-core peak: a faster"),
    (Facts(_point(3000.0)), ["position_compute", "not_profiled"],
     "compute-bound by its position on the bf16 tensor-core peak"),
    (Facts(_point(3000.0, precision="fp8", compute=None)),
     ["position_memory", "not_profiled", "no_peak"], "no fp8 peak was measured"),
    # a pipe's ceiling known as the bytes its instruction stream moves is a known peak
    (Facts(_point(3000.0, precision="fp32", compute=ComputeCeiling(
        "issue", None, "instruction issue", "SASS: FADD x24", bytes_per_s=5e13))),
     ["position_memory", "not_profiled"], "memory-bound by its position"),
    (Facts(_point(3000.0, compute=dtype_ceiling("bf16", CEILINGS, "no SASS"))),
     ["position_compute", "not_profiled", "assumed_ceiling"],
     "compute ceiling from the dtype (bf16), assumed: no SASS"),
    (Facts(_point(3000.0), {"clock_warning": "the GPU was throttling (hw_thermal)"}),
     ["position_compute", "not_profiled", "clock_warning"], "part of the gap may be the clock's"),
    (Facts(_point(3000.0), {"power_capped": True}),
     ["position_compute", "not_profiled", "power_capped"], "at its power limit"),
    (Facts(_point(3000.0), profiled_case="other",
           no_profile_why="the profile rung failed (ProfileTimeout)"),
     ["position_compute", "not_profiled"], "not profiled (the profile rung ran on case other)"),
    (Facts(_point(3000.0), no_profile_why="the profile rung failed (ProfileTimeout)"),
     ["position_compute", "not_profiled"], "no profile (the profile rung failed (ProfileTimeout))"),
]


@pytest.mark.parametrize(("facts", "rules", "says"), NO_COUNTERS)
def test_the_rules_without_counters(facts, rules, says):
    found = likely_limiter(facts)
    assert list(found.rules) == rules
    assert says in found.text


def test_every_rule_has_a_test():
    """The recorded profiles and the cases above fire every rule of the table."""
    covered = {name for fixture in FIXTURES for name in row_of(fixture)["limiter_rules"]}
    covered |= {name for facts, _, _ in NO_COUNTERS for name in likely_limiter(facts).rules}
    assert covered == {rule.name for rule in RULES}


# The facts every rule reads, over values on both sides of each threshold.
PCTS = (None, 10.0, 59.0, 60.0, 77.0, 95.0)
TRAFFIC = (None, 0.3, 0.8, 1.0, 1.25, 2.0)


def _all_facts():
    points = {
        "memory": _point(1600.0, work=(2**28, 12 * 2**28), precision="fp32",
                         compute=dtype_ceiling("fp32", CEILINGS, "x")),
        "compute": _point(3000.0),
        "at": _point(1420.0), "suspect": _point(1100.0),
        "tiny": _point(4.0, work=(2**16, 12 * 2**16), precision="fp32",
                       compute=dtype_ceiling("fp32", CEILINGS, "x")),
    }
    benches = ({}, {"launch_bound": True, "kernels_per_call": 3.0, "host_median_us": 9.0,
                    "median_us": 3.0, "clock_warning": "hot", "sm_mhz_timed": 1500,
                    "sm_max_mhz": 1980, "power_capped": True})
    for point, memory, compute, dram, traffic, bench, profiled in itertools.product(
            points.values(), PCTS, PCTS, PCTS, TRAFFIC, benches, (None, "here", "elsewhere")):
        if profiled != "here" and (memory, compute, dram, traffic) != (None,) * 4:
            continue  # without the profile on this case there are no counters
        signals = ProfileSignals(memory_pct=memory, compute_pct=compute, dram_pct=dram,
                                 dram_bytes=traffic * point.bytes_moved if traffic else None)
        yield Facts(point, bench, signals, {"here": "c", "elsewhere": "d"}.get(profiled), "c")


def test_no_two_fired_rules_contradict_each_other():
    seen = 0
    fired_names: set[str] = set()
    for facts in _all_facts():
        rules = fired(facts)
        assert contradictions(rules) == [], (facts, [r.name for r in rules])
        bound = {c for r in rules for c in r.claims} & {"memory-bound", "compute-bound",
                                                        "latency-bound"}
        if facts.point.verdict == "below":  # exactly one diagnosis of what binds
            assert len(bound) == 1, (facts, [r.name for r in rules])
        assert likely_limiter(facts).text
        fired_names.update(r.name for r in rules)
        seen += 1
    assert seen > 5000 and fired_names == {rule.name for rule in RULES} - {"no_peak"}


def test_the_contradiction_table_itself_catches_a_contradiction():
    memory = next(r for r in RULES if r.name == "position_memory")
    compute = next(r for r in RULES if r.name == "counted_compute")
    assert contradictions([memory, compute]) == [("memory-bound", "compute-bound")]
    assert ("extra-traffic", "dram-below-minimum") in CONTRADICTIONS
    assert limiter.EXTRA_TRAFFIC > 1 > limiter.FEWER_BYTES
