"""The roofline arithmetic (krung.judge.rungs.roofline.model) and the rung's figures, on known numbers; the
datasheet table; and calibration keys."""

from __future__ import annotations

import math

import pytest

from krung.judge.device import DATASHEET, clock_warning, datasheet_for, floor_us
from krung.judge.rungs.roofline import (
    _allows_tf32,
    adopt,
    case_figures,
    ceilings_table,
    summarise,
)
from krung.judge.rungs.roofline import model as roofline
from krung.judge.rungs.roofline.calibration import METHOD, beside_datasheet, find, key_of
from krung.judge.rungs.roofline.limiter import (
    Facts,
    ProfileSignals,
    likely_limiter,
    profile_signals,
)
from krung.judge.rungs.roofline.model import Ceilings, place

# Round ceilings, so every expected figure can be worked out by hand.
CEILINGS = Ceilings(dram_bytes_per_s=4e12, flops_per_s={"bf16": 800e12, "fp32": 50e12,
                                                        "tf32": 400e12},
                    l2_bytes_per_s=10e12, l2_size_bytes=50 * 2**20)
MATMUL_8K = (2 * 8192**3, 3 * 8192**2 * 2)  # bf16: flops, bytes (A, B read; C written)
ADD_256M = (2**28, 12 * 2**28)  # fp32 x + y: one add, 3 * 4 bytes per element


def test_a_compute_bound_matmul():
    flops, moved = MATMUL_8K
    point = place(flops, moved, 2000.0, CEILINGS, "bf16")
    assert point.bound == "compute" and point.ceiling == "bf16"
    assert point.intensity == pytest.approx(8192 / 3)  # 2 n^3 / (6 n^2)
    assert point.ridge == pytest.approx(200.0)  # 800e12 / 4e12
    assert point.roofline_us == pytest.approx(flops / 800e12 * 1e6)  # 1374.4 us
    assert point.pct == pytest.approx(100 * 1374.389535 / 2000, rel=1e-6)
    assert point.achieved_flops_per_s == pytest.approx(flops / 2e-3)
    assert point.achieved_bytes_per_s == pytest.approx(moved / 2e-3)
    assert point.verdict == "below"
    assert point.headroom == pytest.approx(2000 / 1374.389535, rel=1e-6)


def test_a_memory_bound_add_at_the_roofline():
    flops, moved = ADD_256M
    point = place(flops, moved, 850.0, CEILINGS, "fp32")
    assert point.bound == "memory" and point.ceiling == "dram"
    assert point.intensity == pytest.approx(1 / 12)
    assert point.roofline_us == pytest.approx(moved / 4e12 * 1e6)  # 805.3 us
    assert point.pct == pytest.approx(100 * 805.306368 / 850)  # 94.7%
    assert point.verdict == "at-roofline"  # >= 90%
    assert place(flops, moved, 850.0, CEILINGS, "fp32", threshold_pct=95).verdict == "below"


def test_the_threshold_is_inclusive():
    flops, moved = ADD_256M
    exact = moved / 4e12 * 1e6 / 0.9  # the time that is exactly 90% of the roofline
    assert place(flops, moved, exact * (1 - 1e-9), CEILINGS, "fp32").verdict == "at-roofline"
    assert place(flops, moved, exact * 1.001, CEILINGS, "fp32").verdict == "below"


def test_faster_than_the_ceilings_allow_is_suspect_beyond_the_margin():
    flops, moved = MATMUL_8K
    floor = flops / 800e12 * 1e6
    near = place(flops, moved, floor / 1.05, CEILINGS, "bf16")  # 105%: calibration noise
    assert near.verdict == "at-roofline" and near.why_suspect is None
    far = place(flops, moved, floor / 1.3, CEILINGS, "bf16")
    assert far.verdict == "suspect"
    assert "above the measured bf16 peak of 800 TFLOP/s" in far.why_suspect
    assert far.pct == pytest.approx(130)


def test_a_working_set_that_fits_in_the_l2_may_beat_dram_but_not_the_l2():
    flops, moved = 2**20, 12 * 2**20  # 12 MiB: fits in the 50 MiB L2
    dram_floor = moved / 4e12 * 1e6
    cached = place(flops, moved, dram_floor / 1.8, CEILINGS, "fp32")  # 7.2 TB/s < L2's 10
    assert cached.verdict == "at-roofline" and cached.pct == pytest.approx(180)
    beyond = place(flops, moved, moved / 12e12 * 1e6, CEILINGS, "fp32")  # 12 TB/s > 11
    assert beyond.verdict == "suspect" and "measured L2 bandwidth" in beyond.why_suspect
    big = 12 * 2**28  # too big for the L2: the DRAM ceiling alone applies
    assert place(2**28, big, big / 7.2e12 * 1e6, CEILINGS, "fp32").verdict == "suspect"


def test_a_precision_without_a_peak_has_only_the_memory_ceiling():
    flops, moved = MATMUL_8K
    point = place(flops, moved, 2000.0, CEILINGS, "fp8")
    assert point.bound == "memory" and point.ridge is None
    assert "no fp8 peak was measured" in likely_limiter(Facts(point)).text


def test_work_and_times_that_cannot_be_placed():
    with pytest.raises(ValueError, match="time must be positive"):
        place(10, 10, 0.0, CEILINGS, "fp32")
    with pytest.raises(ValueError, match="work must be positive"):
        place(0, 0, 1.0, CEILINGS, "fp32")
    pure_copy = place(0, 4e9, 1000.0, CEILINGS, "fp32")  # no flops: bandwidth only
    assert pure_copy.bound == "memory" and pure_copy.pct == pytest.approx(100)
    no_bytes = place(8e11, 0, 1000.0, CEILINGS, "bf16")
    assert no_bytes.intensity is None and no_bytes.bound == "compute"


@pytest.mark.parametrize(("dtype", "tf32", "precision"), [
    ("float32", False, "fp32"), ("float32", True, "tf32"), ("bfloat16", True, "bf16"),
    ("torch.float16", False, "fp16"), ("float8_e4m3fn", False, "fp8"),
    ("float8_e5m2", False, "fp8"), ("int8", False, "int8"), ("float64", False, "fp64"),
    ("complex64", False, "fp32"),
])
def test_the_ceiling_a_dtype_runs_against(dtype, tf32, precision):
    assert roofline.precision_of(dtype, tf32) == precision


def test_problems_that_accept_tf32_run_against_its_peak():
    assert _allows_tf32("tf32") and _allows_tf32({"float32": "tf32"})
    assert not _allows_tf32(None) and not _allows_tf32({"atol": 1e-3})
    assert not _allows_tf32({"bfloat16": "tf32"})


def _limiter(time_us: float, bench_row=None, profile=None, work=MATMUL_8K,
             precision="bf16") -> str:
    point = place(*work, time_us, CEILINGS, precision)
    return likely_limiter(Facts(point, bench_row or {}, profile or ProfileSignals(),
                                "n=1" if profile else None, "n=1")).text


def test_the_likely_limiter_from_the_position_alone():
    assert _limiter(2000.0).startswith("69% of the bf16 peak, 1.5x from the roofline; "
                                       "compute-bound by its position")
    memory = _limiter(1600.0, work=ADD_256M, precision="fp32")
    assert memory.startswith("50% of DRAM bandwidth, 2x from the roofline; memory-bound by "
                             "its position")
    assert "no profile (`--rungs +profile` adds" in memory
    at = _limiter(1400.0)
    assert at.startswith("at 98% of the bf16 peak: a faster version needs less work")


def test_the_likely_limiter_from_what_the_benchmark_saw():
    row = {"launch_bound": True, "host_median_us": 9000.0, "median_us": 3000.0,
           "kernels_per_call": 3.0}
    text = _limiter(3000.0, row)
    assert "launch-bound: 9e+03 us host-visible against 3e+03 us on the device" in text
    assert "3 kernels per call: intermediate results go through memory" in text
    assert text.endswith("; first try: fewer launches per call, or capture the call in a "
                         "CUDA graph")
    tiny = _limiter(4.0, work=(2**16, 12 * 2**16), precision="fp32")  # 0.2 us of work
    assert "little work" in tiny
    hot = _limiter(3000.0, {"clock_warning": "the GPU was throttling (hw_thermal) after the "
                                             "measurement"})
    assert ("; the GPU was throttling (hw_thermal) after the measurement: part of the gap "
            "may be the clock's") in hot
    slow = _limiter(3000.0, {"sm_mhz_timed": 1707, "sm_max_mhz": 1980})
    assert "the samples ran at 1707 MHz, 14% under the top clock (1980 MHz)" in slow
    assert "under the top clock" not in _limiter(3000.0, {"sm_mhz_timed": 2003,
                                                          "sm_max_mhz": 1980})
    assert "under the top clock" not in _limiter(1600.0, {"sm_mhz_timed": 1707,
                                                          "sm_max_mhz": 1980},
                                                 work=ADD_256M, precision="fp32")
    capped = _limiter(3000.0, {"power_capped": True})
    assert ("the GPU was at its power limit (sw_power_cap): sustained heavy math runs at a "
            "lower clock than the short-run peak, so part of the gap is power") in capped


def test_the_likely_limiter_from_a_profile_summary():
    latency = _limiter(1600.0, profile=ProfileSignals(memory_pct=31.0, compute_pct=22.0,
                                                      occupancy_pct=18.5),
                       work=ADD_256M, precision="fp32")
    assert ("profile of this case (ncu): memory 31%, compute 22%, occupancy 18%; "
            "latency-bound") in latency
    traffic = _limiter(1600.0, profile=ProfileSignals(memory_pct=92.0, compute_pct=10.0,
                                                      dram_bytes=2.5 * ADD_256M[1]),
                       work=ADD_256M, precision="fp32")
    assert "memory-bound with extra traffic: DRAM moved 2.50x the minimum bytes" in traffic
    named = _limiter(2500.0, profile=ProfileSignals(memory_pct=20.0, compute_pct=70.0,
                                                    limiter="tensor pipe"))
    assert "profile of this case (ncu): memory 20%, compute 70%, limiter tensor pipe" in named


def test_profile_signals_are_read_defensively():
    assert profile_signals(None).empty
    assert profile_signals(["not", "a", "dict"]).empty
    assert profile_signals({"memory_throughput_pct": "high", "sm_pct": True}).empty
    top = profile_signals({"dram_throughput_pct": 80, "sm_throughput_pct": 12.5,
                           "achieved_occupancy": 40.0, "bottleneck": "memory"})
    assert top == ProfileSignals(memory_pct=80.0, compute_pct=12.5, occupancy_pct=40.0,
                                 limiter="memory", dram_pct=80.0)
    per_case = {"memory_pct": 10, "per_case": [
        {"case": "n=1", "memory_throughput_pct": 55.0},
        {"case": "n=2", "memory_throughput_pct": 66.0, "compute_throughput_pct": 7.0}]}
    assert profile_signals(per_case, "n=2") == ProfileSignals(memory_pct=66.0, compute_pct=7.0)
    assert profile_signals(per_case, "n=9") == ProfileSignals(memory_pct=10.0)
    kernels = {"kernels": [{"name": "a", "duration_us": 3.0, "sm_pct": 90.0},
                           {"name": "b", "duration_us": 40.0, "sm_pct": 20.0}]}
    assert profile_signals(kernels).compute_pct == 20.0  # the slowest kernel speaks
    assert profile_signals({"memory_pct": math.inf}).empty
    # The profile rung's own shape: one case, `per_kernel` rows timed in ns.
    rung = {"case": "n=2", "kernels": 2, "per_kernel": [
        {"kernel": "big", "duration_ns": 900, "memory_pct": 91.0, "compute_pct": 8.0,
         "achieved_occupancy_pct": 60.0, "dram_read_bytes": 800, "dram_write_bytes": 400,
         "launches": 2, "top_stalls": [{"reason": "long_scoreboard", "cycles_per_issue": 9.1}]},
        {"kernel": "small", "duration_ns": 100, "memory_pct": 5.0, "compute_pct": 70.0,
         "dram_read_bytes": 10, "dram_write_bytes": 0, "launches": 1}]}
    assert profile_signals(rung, "n=2") == ProfileSignals(
        memory_pct=91.0, compute_pct=8.0, occupancy_pct=60.0, dram_bytes=2 * 1200 + 10,
        stalls=("long_scoreboard",), kernel="big")
    assert profile_signals(rung, "n=9").empty  # that case was not profiled


def test_the_rung_figures_from_case_rows():
    ceilings_rows = ceilings_table({"dram_bytes_per_s": 4e12, "l2_bytes_per_s": 10e12,
                                    "flops_per_s": {"bf16": 800e12}}, "NVIDIA H200")
    assert [r["ceiling"] for r in ceilings_rows] == ["dram", "l2", "bf16"]
    assert all(r["from"] == "measured" and r["used"] == r["measured"] for r in ceilings_rows)
    assert ceilings_rows[0]["datasheet"] == 4.8e12 and ceilings_rows[1]["datasheet"] is None
    flops, moved = MATMUL_8K
    floor = flops / 800e12 * 1e6
    rows = [case_figures({"case": f"case{i}", "median_us": floor / f}, "bf16", flops, moved,
                         CEILINGS, 90.0, None) for i, f in enumerate((0.5, 0.95))]
    figures = summarise(rows, 90.0, "measured now", ceilings_rows)
    assert figures["verdict"] == "below" and figures["at_roofline"] == "1/2"
    assert figures["pct_of_roofline"] == pytest.approx(100 * math.sqrt(0.5 * 0.95))
    assert figures["worst_case"] == "case0" and figures["limiter"] == rows[0]["limiter"]
    assert rows[0]["tflops"] == pytest.approx(400) and rows[0]["bound"] == "compute"
    assert figures["per_case"] == rows and figures["ceilings"] == ceilings_rows
    suspect = case_figures({"case": "fast", "median_us": floor / 2}, "bf16", flops, moved,
                           CEILINGS, 90.0, None)
    assert summarise([*rows, suspect], 90.0, "x", [])["verdict"] == "suspect"
    assert summarise([*rows, suspect], 90.0, "x", [])["limiter"].startswith("faster than")
    unplaced = case_figures({"case": "zero", "median_us": 1.0}, "bf16", 0, 0, CEILINGS, 90.0,
                            None)
    assert unplaced["verdict"] is None and "not placed" in unplaced["limiter"]
    assert summarise([unplaced], 90.0, "x", []) is None


@pytest.mark.parametrize(("name", "sheet"), [
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"),
    ("NVIDIA B200", "B200"), ("NVIDIA GH200 480GB", None), ("NVIDIA GeForce RTX 4090", None),
])
def test_datasheets_match_whole_names_longest_first(name, sheet):
    found = datasheet_for(name)
    assert (found.name if found else None) == sheet


def test_one_datasheet_table_gives_peaks_per_precision_and_the_floor():
    h200 = DATASHEET["H200"]
    assert h200.dram_bytes_per_s == 4.8e12 and h200.flops_per_s["bf16"] == 989e12
    assert h200.top_flops_per_s == 1979e12  # fp8 dense
    assert "fp8" not in DATASHEET["A100"].flops_per_s  # Ampere has no fp8 tensor cores
    for sheet in DATASHEET.values():  # dense rates rise with lower precision
        f = sheet.flops_per_s
        assert f["fp32"] <= f["tf32"] <= f["bf16"] == f["fp16"] <= f["int8"]
    # the impossible-time floor: the most generous rate of any precision
    assert floor_us("NVIDIA H200", 1979e12, 0) == pytest.approx(1e6)
    assert floor_us("NVIDIA H200", 0, 4.8e12) == pytest.approx(1e6)
    assert floor_us("NVIDIA GeForce RTX 4090", 10, 10) is None


def test_calibrations_are_kept_per_device_driver_and_versions():
    env = {"device_name": "NVIDIA H200", "driver": "570.1", "torch": "2.13.0",
           "cuda": "12.8", "host": "any", "device": "cuda"}
    key = key_of(env)
    assert key == {"device_name": "NVIDIA H200", "driver": "570.1", "torch": "2.13.0",
                   "cuda": "12.8", "method": METHOD}
    entries = [{"key": key_of({**env, "driver": "560.0"}), "record": {}},
               {"key": key, "record": {"dram_bytes_per_s": 1.0}}]
    assert find(entries, key) is entries[1]
    assert find(entries, key_of({**env, "torch": "2.12.0"})) is None
    assert key_of({"device_name": "x"})["driver"] == ""  # NVML missing: still a key


def test_measured_ceilings_beside_the_datasheet():
    record = {"dram_bytes_per_s": 4.3e12, "l2_bytes_per_s": 9.6e12,
              "flops_per_s": {"fp32": 51e12, "bf16": 790e12},
              "unsupported": {"fp8": "fp8 matmul needs compute capability 8.9"}}
    rows = {r["ceiling"]: r for r in beside_datasheet(record, "NVIDIA H200")}
    assert rows["dram"]["pct_of_datasheet"] == pytest.approx(100 * 4.3 / 4.8)
    assert rows["bf16"]["pct_of_datasheet"] == pytest.approx(100 * 790 / 989)
    assert rows["l2"]["datasheet"] is None and rows["l2"]["measured"] == 9.6e12
    assert rows["tf32"]["measured"] is None and rows["tf32"]["datasheet"] == 495e12
    assert rows["fp8"]["note"].startswith("fp8 matmul needs")
    unknown = beside_datasheet(record, "Some Future GPU")
    assert all(r["datasheet"] is None for r in unknown)


def test_a_calibration_taken_at_low_clocks_serves_one_run_and_is_not_kept():
    record = {"dram_bytes_per_s": 4e12, "flops_per_s": {"bf16": 800e12}}
    warned = {"record": {**record, "clock": {"warning": "the GPU was throttling (thermal) "
                                                        "after the measurement"}},
              "measured_at": "2026-12-01T10:00:00+00:00"}
    kept: list[dict] = []
    source = adopt(warned, kept.append)
    assert kept == []
    assert "not kept: the GPU was throttling (thermal)" in source
    assert "krung calibrate --force" in source
    clean = {"record": {**record, "clock": {"warning": None}},
             "measured_at": "2026-12-01T10:05:00+00:00"}
    assert adopt(clean, kept.append) == "measured now (2026-12-01T10:05:00+00:00)"
    assert kept == [clean]


def _clock(sm_mhz: int, throttle: list[str], power_capped: bool = False) -> dict:
    return {"sm_mhz": sm_mhz, "sm_max_mhz": 1980, "throttle": throttle,
            "power_capped": power_capped}


def test_the_power_cap_alone_is_no_clock_warning():
    # A bf16 matmul holds its own clock down to stay under the board's power limit (seen on
    # the H200 after calibration): that is the speed such work gets, so the ceiling is kept.
    assert clock_warning(_clock(1980, []), _clock(1605, [], power_capped=True)) is None
    assert "hw_thermal" in clock_warning(None, _clock(1605, ["hw_thermal"], power_capped=True))
    assert "below 90%" in clock_warning(None, _clock(1200, []))
    assert "below 70%" in clock_warning(None, _clock(900, [], power_capped=True))
    assert "before the measurement" in clock_warning(_clock(1980, ["sw_thermal"]),
                                                     _clock(1980, []))


def test_the_time_at_the_top_clock_scales_only_the_compute_share():
    flops, moved = MATMUL_8K
    bench = {"case": "big", "median_us": 2000.0, "sm_mhz_timed": 1707, "sm_max_mhz": 1980}
    row = case_figures(bench, "bf16", flops, moved, CEILINGS, 90.0, None)
    compute_s, memory_s = flops / 800e12, moved / 4e12
    share = compute_s / (compute_s + memory_s)  # 93%: most of it follows the clock
    at_top = 2000.0 * (1 - share + share * 1707 / 1980)
    assert row["median_us_at_max_clock"] == pytest.approx(at_top)
    assert row["clock_scaling"] == (f"x{at_top / 2000:.3g}: the compute share of the roofline "
                                    "time (93%) scaled by the clock, 1707 MHz timed of 1980 "
                                    "MHz top")
    assert row["bound"] == "compute" and row["median_us"] == 2000.0
    assert row["pct"] == pytest.approx(100 * compute_s * 1e6 / at_top)  # placed at the top
    # memory-bound: the small compute share scales little, and the time as timed is placed
    add = case_figures({**bench, "median_us": 1600.0}, "fp32", *ADD_256M, CEILINGS, 90.0, None)
    share = (2**28 / 50e12) / (2**28 / 50e12 + ADD_256M[1] / 4e12)
    assert add["median_us_at_max_clock"] == pytest.approx(
        1600.0 * (1 - share + share * 1707 / 1980))
    assert add["pct"] == pytest.approx(100 * ADD_256M[1] / 4e12 * 1e6 / 1600.0)
    # no clock figures, or the samples at the top clock: the time as timed
    for extra in ({}, {"sm_mhz_timed": 1980, "sm_max_mhz": 1980}):
        plain = case_figures({"case": "c", "median_us": 2000.0, **extra}, "bf16", flops, moved,
                             CEILINGS, 90.0, None)
        assert plain["median_us_at_max_clock"] == 2000.0 and "clock_scaling" not in plain


def test_the_next_step_names_the_number_to_beat_the_kernel_and_the_first_try():
    flops, moved = MATMUL_8K
    floor = flops / 800e12 * 1e6
    rows = [case_figures({"case": f"case{i}", "median_us": floor / f}, "bf16", flops, moved,
                         CEILINGS, 90.0, None, kernel="matmul_kernel")
            for i, f in enumerate((0.5, 0.95))]
    figures = summarise(rows, 90.0, "measured now", [])
    assert figures["next_step"] == (
        f"beat {floor:.4g} us (the roofline) on case case0 in matmul_kernel, now "
        f"{2 * floor:.4g} us (50% of the bf16 peak); first try: climb the artifacts rung "
        "too, so that the SASS says which pipes bind (the tensor cores, or the FMA, MUFU or "
        "issue limits)")
    assert figures["compute_ceilings"] == [{
        "compute_ceiling": "bf16", "compute_label": "the bf16 peak", "compute_per_s": 800e12,
        "compute_bytes_per_s": None, "ceiling_chosen_by": "the dtype (bf16), assumed: no SASS was given to choose by",
        "ceiling_assumed": True, "cases": ["case0", "case1"]}]
    at = [case_figures({"case": "c", "median_us": floor / 0.95}, "bf16", flops, moved,
                       CEILINGS, 90.0, None)]
    assert summarise(at, 90.0, "x", [])["next_step"].startswith("every bench case is at the "
                                                                "roofline: stop optimising")
    fast = case_figures({"case": "fast", "median_us": floor / 2}, "bf16", flops, moved,
                        CEILINGS, 90.0, None)
    assert summarise([*rows, fast], 90.0, "x", [])["next_step"] == (
        f"case fast took {floor / 2:.4g} us, under the {floor:.4g} us the roofline allows: "
        "check that every call does all the work (no results kept across calls, no skipped "
        "elements); if it does, correct the problem's flops()/bytes_moved()")
