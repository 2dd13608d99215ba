"""The timing protocol's statistics and its CPU path."""

from __future__ import annotations

import random
import statistics
import time

import pytest

from krung.timing import TimingPlan, ci_fraction, measure, median_ci, summarise


def test_median_ci_brackets_the_median_and_narrows_with_more_samples():
    rng = random.Random()
    few = [rng.gauss(100, 5) for _ in range(20)]
    many = [rng.gauss(100, 5) for _ in range(2000)]
    for values in (few, many):
        middle, low, high = median_ci(values)
        assert low <= middle <= high
        assert middle == pytest.approx(statistics.median(values))
    assert ci_fraction(many) < ci_fraction(few)
    assert ci_fraction([1.0, 2.0]) == float("inf")


def test_summarise_reports_quantiles_and_spread():
    rng = random.Random()
    values = [rng.uniform(10, 20) for _ in range(501)]
    stats = summarise(values)
    assert stats["samples"] == 501
    assert min(values) <= stats["p10_us"] < stats["median_us"] < stats["p90_us"] <= max(values)
    assert stats["cv"] == pytest.approx(statistics.pstdev(values) / statistics.fmean(values))


def test_cpu_measurement_rotates_input_sets_and_respects_its_cap():
    calls = []

    def call(i):
        calls.append(i)
        time.sleep(0.002)

    plan = TimingPlan(warmup_s=0.0, max_s=0.2, min_samples=5, max_samples=1000, target_ci=0.0)
    start = time.perf_counter()
    samples = measure(call, 3, "cpu", plan)
    assert time.perf_counter() - start < 1.0
    assert samples.mode == "cpu-wall" and samples.input_sets == 3
    assert len(samples.device_us) >= 5
    assert all(t >= 2000 for t in samples.device_us)  # each call slept 2 ms
    assert set(calls) == {0, 1, 2}


def test_cpu_measurement_stops_early_once_the_median_is_tight():
    plan = TimingPlan(warmup_s=0.0, max_s=5.0, min_samples=10, max_samples=100000,
                      target_ci=0.5)
    samples = measure(lambda i: time.sleep(0.001), 1, "cpu", plan)
    assert samples.wall_s < 1.0
