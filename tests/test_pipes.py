"""Per-pipe ceilings from a calibration record, and the compute ceiling a version's kernels
can reach, chosen from recorded SASS mixes (tests/data/sass_mixes.json, written by
scripts/record_sass_mixes.py: Triton kernels compiled for sm_90a, counted by krung's own
sass.mix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from krung.judge.device import DATASHEET
from krung.judge.rungs.roofline import case_figures, ceilings_table, pipes
from krung.judge.rungs.roofline.calibration import beside_datasheet
from krung.judge.rungs.roofline.model import Ceilings, place
from tests.recorded import H200_RECORD

MIXES = {name: entry["sass"] for name, entry in json.loads(
    (Path(__file__).parent / "data" / "sass_mixes.json").read_text())["kernels"].items()}
# A calibration record with the pipes, of the order of the H200's datasheet (the GPU
# measurement replaces these figures: tests/test_gpu_roofline.py); the MUFU kernel could not
# run, so its datasheet figure stands in, marked.
PIPES = {"fma": 60e12, "hfma2": 120e12, "mufu": DATASHEET["H200"].pipes_per_s["mufu"],
         "int": 30e12, "smem": 30e12}
RECORD = {**H200_RECORD, "pipes_per_s": PIPES, "device": {"name": "NVIDIA H200", "sm": "9.0",
                                                          "sms": 132},
          "pipes_from": {"fma": "measured", "hfma2": "measured", "int": "measured",
                         "smem": "measured",
                         "mufu": "datasheet (not measured: NVRTC through torch failed)"}}
CEILINGS = Ceilings.from_record(RECORD)


def mix(*names: str) -> dict:
    """The version's mix, as the roofline sums it, of these recorded kernels."""
    found = pipes.version_mix({"per_kernel": [{"sass": MIXES[n]} for n in names]})
    assert found is not None
    return found


def test_a_calibration_record_gives_every_pipe_and_says_where_each_came_from():
    assert CEILINGS.pipes_per_s == PIPES and CEILINGS.sm == "9.0"
    rows = {r["ceiling"]: r for r in beside_datasheet(RECORD, "NVIDIA H200")}
    assert rows["fma"]["measured"] == 60e12 and rows["fma"]["from"] == "measured"
    assert rows["fma"]["datasheet"] == pytest.approx(132 * 1980e6 * 256)  # 66.9 TFLOP/s
    assert rows["fma"]["pct_of_datasheet"] == pytest.approx(100 * 60 / 66.9, rel=1e-3)
    assert rows["hfma2"]["datasheet"] == pytest.approx(2 * rows["fma"]["datasheet"])
    assert rows["smem"]["unit"] == "B/s" and rows["mufu"]["unit"] == "op/s"
    mufu = rows["mufu"]
    assert mufu["measured"] is None and mufu["used"] == PIPES["mufu"]
    assert mufu["note"].startswith("datasheet (not measured: NVRTC")
    table = {r["ceiling"]: r for r in ceilings_table(RECORD, "NVIDIA H200")}
    assert table["mufu"]["from"].startswith("datasheet") and table["mufu"]["used"]
    assert table["fma"]["from"] == "measured"
    # A record from before the pipes were measured: no pipe is in use, the datasheet is shown.
    old = {r["ceiling"]: r for r in beside_datasheet(H200_RECORD, "NVIDIA H200")}
    assert old["fma"]["used"] is None and old["fma"]["datasheet"] > 0
    assert "fma" not in {r["ceiling"] for r in ceilings_table(H200_RECORD, "NVIDIA H200")}


def test_a_matmul_with_hgmma_gets_the_tensor_core_ceiling():
    bf16 = pipes.compute_ceiling(mix("matmul_bf16"), "bf16", CEILINGS)
    assert (bf16.name, bf16.per_s, bf16.assumed) == ("bf16", 790e12, False)
    assert bf16.chosen_by == "SASS: HGMMA x4" and bf16.label == "the bf16 tensor-core peak"
    # float32 operands on the tensor cores run as TF32: that is the peak they can reach
    fp32 = pipes.compute_ceiling(mix("matmul_fp32"), "fp32", CEILINGS)
    assert (fp32.name, fp32.per_s) == ("tf32", 378e12)


def test_a_gelu_without_tensor_cores_gets_its_pipes_ceiling_not_the_tensor_cores():
    gelu = mix("gelu_tanh_fp32")
    assert gelu["tensor_core_total"] == 0 and gelu["ffma"] and gelu["mufu"]
    times = pipes.pipe_times(gelu, CEILINGS)
    # FFMA, FMUL and FADD on the FMA pipe; MUFU on the special function unit
    assert times["fma"] == pytest.approx((56 + 56 + 24) / (60e12 / 2))
    assert times["mufu"] == pytest.approx(16 / PIPES["mufu"])
    assert times["issue"] == pytest.approx(293 / (60e12 / 2))  # every instruction issues
    ceiling = pipes.compute_ceiling(gelu, "fp32", CEILINGS)
    assert ceiling.name == "issue" and ceiling.per_s is None and not ceiling.assumed
    # 64 bytes per thread (8 LDG.32 and 8 STG.32) for 293 instructions at 30e12 a second
    assert ceiling.bytes_per_s == pytest.approx(64 / times["issue"])
    assert "FFMA x56, FMUL x56, FADD x24, MUFU x16 in 293 instructions" in ceiling.chosen_by
    assert "4.58 instructions per byte moved" in ceiling.chosen_by
    # the bf16 GELU (fp32 math on half the bytes) issues more per byte: below DRAM's 4.3 TB/s
    bf16 = pipes.compute_ceiling(mix("gelu_erf_bf16"), "bf16", CEILINGS)
    assert bf16.bytes_per_s < CEILINGS.dram_bytes_per_s < ceiling.bytes_per_s
    assert bf16.name not in ("bf16", "fp32", "tf32")


@pytest.mark.parametrize(("counts", "named"), [
    ({"mufu": 64, "ffma": 40, "instructions": 120}, "mufu"),  # MUFU dominates
    ({"ffma": 200, "mufu": 4, "instructions": 230}, "fma"),  # issue is mostly the FFMAs
    ({"hfma2": 300, "instructions": 330}, "hfma2"),
    ({"imad": 90, "fadd": 4, "instructions": 100}, "int"),
    ({"ffma": 20, "instructions": 200}, "issue"),  # far more issues than the FMA pipe's own
])
def test_the_binding_pipe_is_named(counts, named):
    found = pipes.compute_ceiling({**counts, "ldg": {"128": 2}, "stg": {"128": 1}}, "fp32",
                                  CEILINGS)
    assert found.name == named
    assert found.bytes_per_s == pytest.approx(48 / max(pipes.pipe_times(
        {**counts}, CEILINGS).values()))


def test_without_bytes_the_pipes_scale_by_flops_and_without_either_the_fma_peak_is_assumed():
    tma = {"ffma": 100, "instructions": 150, "tma_total": 2}  # bytes the widths do not show
    by_flops = pipes.compute_ceiling(tma, "fp32", CEILINGS)
    assert by_flops.per_s == pytest.approx(200 / (150 / 30e12))  # issue binds: 1.5x FMA's
    assert "scaled by its FLOPs" in by_flops.chosen_by
    nothing = pipes.compute_ceiling({"instructions": 40, "tma_total": 1}, "fp32", CEILINGS)
    assert nothing.name == "fma" and nothing.per_s == 60e12 and nothing.assumed
    unmeasured = pipes.compute_ceiling(mix("gelu_tanh_fp32"), "fp32",
                                       Ceilings.from_record(H200_RECORD))
    assert unmeasured.assumed and unmeasured.name == "fp32"  # the dtype, as before
    assert "no pipe rate was measured" in unmeasured.chosen_by


def test_where_the_artifacts_gave_no_sass_the_dtype_is_an_assumption():
    found = pipes.compute_ceiling(None, "bf16", CEILINGS)
    assert (found.name, found.per_s, found.assumed) == ("bf16", 790e12, True)
    assert found.chosen_by == ("the dtype (bf16), assumed: the artifacts rung did not run, so "
                               "no SASS says which pipes the kernels use")
    assert pipes.version_mix(None) is None
    assert pipes.version_mix({"per_kernel": [{"error": "no cubin"}]}) is None


def test_issue_is_twice_the_fp32_rate_where_the_fp32_pipe_is_half_width():
    a100 = Ceilings(2e12, pipes_per_s={"fma": 19.5e12}, sm="8.0")
    h200 = Ceilings(4.8e12, pipes_per_s={"fma": 67e12}, sm="9.0")
    assert pipes.issue_per_s(a100) == pytest.approx(19.5e12)
    assert pipes.issue_per_s(h200) == pytest.approx(33.5e12)


def test_a_bf16_gelu_case_is_issue_bound_where_the_tensor_cores_called_it_memory_bound():
    n = 2**26  # bf16 in and out: 4 bytes an element; 8 FLOPs an element by the problem's count
    flops, moved = 8.0 * n, 4.0 * n
    time_us = 110.0
    tensor = place(flops, moved, time_us, CEILINGS, "bf16")
    assert tensor.bound == "memory"  # against the bf16 tensor cores (the old answer)
    ceiling = pipes.compute_ceiling(mix("gelu_erf_bf16"), "bf16", CEILINGS)
    row = case_figures({"case": "n=2^26", "median_us": time_us}, "bf16", flops, moved, CEILINGS,
                       90.0, None, compute=ceiling, kernel="gelu_erf")
    assert row["bound"] == "compute" and row["ceiling"] == "issue"
    assert row["roofline_us"] == pytest.approx(moved / ceiling.bytes_per_s * 1e6)
    assert row["ceiling_chosen_by"].startswith("SASS: no tensor-core instruction")
    assert row["ceiling_assumed"] is False and row["kernel"] == "gelu_erf"
    assert row["limiter"].startswith(f"{row['pct']:.0f}% of instruction issue")
    assert "first try: fewer instructions per element" in row["limiter"]


def test_the_rung_places_cases_under_the_sass_ceiling_and_reads_the_profiled_case(tmp_path):
    """The roofline rung on a softmax (no GPU needed: the store keeps the calibration): the
    ceiling comes from the kernels' SASS, the profile rung picks the worst case by the same
    rows, and only that case's limiter reads the counters."""
    import random

    import krung
    from krung.judge.ladder import Context
    from krung.judge.problem import case_label, load_problem
    from krung.judge.rungs import roofline
    from krung.judge.rungs.profile.case import choose_case
    from krung.judge.rungs.roofline.calibration import key_of
    from tests.conftest import PROBLEMS

    problem = load_problem(PROBLEMS / "softmax")
    pcts = random.sample([35.0, 52.0, 71.0, 88.0], 4)
    rows = []
    for case, pct in zip(problem.bench_cases, pcts, strict=True):
        median = problem.bytes_moved(case) / RECORD["dram_bytes_per_s"] * 1e6 / (pct / 100)
        rows.append({"case": case_label(case), "median_us": median, "kernels_per_call": 1.0,
                     "speedup": 2.0, "ref_median_us": 2 * median})
    env = {"device_name": "NVIDIA H200", "driver": "580.1", "torch": "2.11", "cuda": "13.0"}
    results = {
        "benchmark": krung.RungResult("benchmark", krung.Status.OK, figures={"per_case": rows}),
        "artifacts": krung.RungResult("artifacts", krung.Status.OK, figures={"per_kernel": [
            {"kernel": "softmax_kernel", "function": "softmax_kernel",
             "sass": MIXES["softmax_fp32"]}]}),
    }
    fields = {"problem": problem, "solution": None, "device": "cuda", "candidate": None,
              "settings": krung.Settings(), "seed": 7, "run_dir": tmp_path, "results": results,
              "env": env, "calibrations": [{"key": key_of(env), "record": RECORD,
                                            "measured_at": "2026-12-05T10:00:00+00:00"}]}
    worst = case_label(choose_case(Context(**fields))[0])
    assert worst == rows[pcts.index(min(pcts))]["case"]
    results["profile"] = krung.RungResult("profile", krung.Status.OK, figures={
        "case": worst, "per_kernel": [
            {"kernel": "softmax_kernel", "duration_ns": 5000, "memory_pct": 85.0,
             "compute_pct": 30.0, "dram_pct": 84.0, "dram_read_bytes": 3e6,
             "dram_write_bytes": 1e6, "launches": 1}]})
    figures = roofline.run(Context(**fields))
    assert figures["worst_case"] == worst and figures["verdict"] == "below"
    by_case = {r["case"]: r for r in figures["per_case"]}
    for label, row in by_case.items():
        assert row["compute_ceiling"] in ("issue", "fma", "mufu")  # not the tensor cores
        assert row["ceiling_chosen_by"].startswith("SASS: no tensor-core instruction")
        assert row["profiled"] is (label == worst)
        if label == worst:
            assert "profile of this case (ncu, softmax_kernel): memory 85%" in row["limiter"]
        else:
            assert f"not profiled (the profile rung ran on case {worst})" in row["limiter"]
            assert "profile of this case" not in row["limiter"]
    assert figures["next_step"].startswith(
        f"beat {by_case[worst]['roofline_us']:.4g} us (the roofline) on case {worst} in "
        "softmax_kernel, now ")
    assert [c["compute_ceiling"] for c in figures["compute_ceilings"]] == \
        [by_case[worst]["compute_ceiling"]]
    # Without the artifacts rung, the ceiling is the dtype's, said to be an assumption.
    del results["artifacts"]
    figures = roofline.run(Context(**fields))
    row = figures["per_case"][0]
    assert row["ceiling_assumed"] is True and row["compute_ceiling"] == "fp32"
    assert row["ceiling_chosen_by"] == ("the dtype (fp32), assumed: the artifacts rung did not "
                                        "run, so no SASS says which pipes the kernels use")
