"""The roofline chart says which ceiling each case was placed under and what chose it: the
tensor cores from the SASS, a pipe's instruction stream, or the dtype as an assumption."""

from __future__ import annotations

import pytest

from krung.host import charts, svg
from krung.judge.rungs.roofline import case_figures, ceilings_table, summarise
from krung.judge.rungs.roofline.model import Ceilings, ComputeCeiling
from krung.protocol.results import Run, RungResult, Status

RECORD = {"dram_bytes_per_s": 4.3e12, "l2_bytes_per_s": 9.6e12, "l2_size_bytes": 50 * 2**20,
          "flops_per_s": {"bf16": 790e12, "fp32": 51e12}}
CEILINGS = Ceilings.from_record(RECORD)
ISSUE = ComputeCeiling("issue", None, "instruction issue (one warp instruction per clock per "
                       "scheduler)", "SASS: no tensor-core instruction; FFMA x56, MUFU x8 in "
                       "337 instructions", bytes_per_s=3.2e12)
TENSOR = ComputeCeiling("bf16", 790e12, "the bf16 tensor-core peak", "SASS: HGMMA x4")


def run_with(compute: ComputeCeiling, flops: float, moved: float, time_us: float,
             run_id: str) -> Run:
    row = case_figures({"case": "n=1", "median_us": time_us}, compute.name, flops, moved,
                       CEILINGS, 90.0, None, compute=compute)
    figures = summarise([row], 90.0, "measured", ceilings_table(RECORD, "NVIDIA H200"))
    return Run(run_id=run_id, problem="p", problem_path="/p", solution=f"/v/{run_id}.py",
               source_sha256="0" * 64, device="NVIDIA H200", started_at=f"2026-12-0{run_id[-1]}",
               rungs=[RungResult("roofline", Status.OK, figures=figures)])


def test_a_pipe_ceiling_is_drawn_as_the_bandwidth_its_instruction_stream_allows():
    n = 2**26
    gelu = run_with(ISSUE, 8.0 * n, 4.0 * n, 110.0, "run1")
    chart = charts.roofline_chart([gelu])
    assert chart is not None
    by_name = {c.name: c for c in chart.ceilings}
    stream = by_name["issue"]
    assert stream.memory and stream.stream and stream.per_s == 3.2e12
    assert stream.label == "issue (SASS) 3.2 TB/s"
    assert stream.chosen_by.startswith("SASS: no tensor-core instruction")
    assert by_name["dram"].chosen_by == "" and not by_name["dram"].stream
    (point,) = chart.points
    assert point.bound == "compute" and point.ceiling.startswith("instruction issue")
    drawn = svg.roofline_svg(chart)
    assert "issue (SASS) 3.2 TB/s" in drawn and "compute ceilings" in drawn
    assert "; the ceiling: instruction issue" in drawn
    assert "<title>SASS: no tensor-core instruction; FFMA x56, MUFU x8 in 337 instructions" \
           "</title>" in drawn


def test_tensor_and_assumed_ceilings_say_what_chose_them():
    matmul = run_with(TENSOR, 2 * 4096.0**3, 3 * 4096.0**2 * 2, 400.0, "run2")
    chart = charts.roofline_chart([matmul])
    assert chart is not None
    (compute,) = [c for c in chart.ceilings if not c.memory]
    assert compute.label == "bf16 (SASS) 790 TFLOP/s"
    assumed = ComputeCeiling("bf16", 790e12, "the bf16 peak", "the dtype (bf16), assumed: the "
                             "artifacts rung did not run", assumed=True)
    older = run_with(assumed, 2 * 4096.0**3, 3 * 4096.0**2 * 2, 420.0, "run1")
    chart = charts.roofline_chart([older, matmul])
    labels = sorted(c.label for c in chart.ceilings if not c.memory)
    assert labels == ["bf16 (SASS) 790 TFLOP/s"]  # the newest run's ceilings are drawn
    chart = charts.roofline_chart([older])
    assert [c.label for c in chart.ceilings if not c.memory] == \
        ["bf16 (dtype, assumed) 790 TFLOP/s"]


def test_runs_from_before_the_sass_chose_the_ceiling_still_draw_their_precisions():
    figures = summarise([case_figures({"case": "n=1", "median_us": 400.0}, "bf16",
                                      2 * 4096.0**3, 3 * 4096.0**2 * 2, CEILINGS, 90.0, None)],
                        90.0, "measured", [{"ceiling": "dram", "unit": "B/s", "measured": 4.3e12},
                                           {"ceiling": "bf16", "unit": "FLOP/s",
                                            "measured": 790e12},
                                           {"ceiling": "fp32", "unit": "FLOP/s",
                                            "measured": 51e12}])
    assert figures is not None
    del figures["compute_ceilings"]  # the figures of an older krung
    old = Run(run_id="old1", problem="p", problem_path="/p", solution="/v/a.py",
              source_sha256="0" * 64, device="NVIDIA H200", started_at="2026-11-01",
              rungs=[RungResult("roofline", Status.OK, figures=figures)])
    chart = charts.roofline_chart([old])
    assert [(c.name, c.per_s) for c in chart.ceilings] == [("dram", 4.3e12), ("bf16", 790e12)]
    assert chart.ceilings[1].label == "bf16 790 TFLOP/s"
    assert pytest.approx(chart.points[0].pct) == figures["per_case"][0]["pct"]
