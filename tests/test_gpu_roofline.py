"""On the GPU: `krung calibrate` against the figures measured on this H200 before, the
roofline rung's verdicts for the built-in problems, calibration on first use, and the
history and report of GPU runs (the profiled case's limiter: test_gpu_profile_trace.py). Run with `python -m pytest -m gpu -s tests/test_gpu_roofline.py`
to see the figures."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from krung.judge.rungs.roofline.calibration import METHOD
from krung.judge.rungs.roofline.model import SUSPECT_MARGIN
from tests.browser import check_page, find_browser
from tests.conftest import PROBLEMS, Result

pytestmark = pytest.mark.gpu

# Measured on this H200 before (random data, cuBLAS, median device time).
H200_COPY_BYTES_PER_S = 4.3e12
H200_BF16_FLOPS_PER_S = 790e12
# Sane bounds for the pipes on an H200 (132 SMs, 1980 MHz top clock; the datasheet's
# figures, derived per SM and clock in krung.judge.device: FP32 66.9 TFLOP/s, FP16 non-tensor
# 133.8, MUFU 4.18 Top/s, INT32 33.5 Top/s, shared memory 33.4 TB/s). A clock held below the
# top under load measures lower; nothing may measure much above.
H200_PIPES = {"fma": (50e12, 70e12), "hfma2": (90e12, 140e12), "mufu": (3.0e12, 4.4e12),
              "int": (22e12, 35e12), "smem": (22e12, 35e12)}
CALIBRATION_S = 120  # the whole `krung calibrate --force`, torch's start included
BUILTIN_VERSIONS = [("vector_add", "triton_blocked.py", "memory"),
                    ("softmax", "triton_rowwise.py", "memory"),
                    ("rmsnorm", "triton_rowwise.py", "memory"),
                    ("matmul", "triton_grouped_tiles.py", "compute")]


def run_krung(store: Path, *args: str, timeout: float = 1200) -> Result:
    environ = dict(os.environ, KRUNG_STORE=str(store), KRUNG_DEVICE="cuda")
    done = subprocess.run([sys.executable, "-m", "krung", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=environ,
                          cwd=store.parent)
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def gpu_store(tmp_path_factory) -> Path:
    """One store for the module: calibrated once, then used by every evaluation."""
    return tmp_path_factory.mktemp("gpu-roofline") / "krung.db"


def test_calibrate_measures_the_ceilings_measured_before(gpu_store):
    import time

    began = time.monotonic()
    result = run_krung(gpu_store, "calibrate", "--force", "--json")
    took = time.monotonic() - began
    assert result.code == 0, result.stderr
    data = result.json()
    record = data["record"]
    print(json.dumps({"key": data["key"], "ceilings": data["ceilings"],
                      "method": record["method"], "clock": record["clock"],
                      "pipes_from": record.get("pipes_from"), "seconds": round(took, 1)},
                     indent=1))
    assert took < CALIBRATION_S, f"the calibration took {took:.0f} s"
    assert data["key"]["method"] == METHOD
    assert data["cached"] is False
    flops = record["flops_per_s"]
    dram, l2 = record["dram_bytes_per_s"], record["l2_bytes_per_s"]
    assert l2 > dram > 0
    assert {"fp32", "tf32", "fp16", "bf16"} <= set(flops)
    assert flops["fp32"] < flops["tf32"] < flops["bf16"]  # TF32 and half use tensor cores
    assert flops["fp16"] == pytest.approx(flops["bf16"], rel=0.25)
    for row in data["ceilings"]:  # nothing measures above its datasheet value
        if row["measured"] and row["datasheet"]:
            assert row["measured"] <= 1.1 * row["datasheet"], row
    pipes = record["pipes_per_s"]
    assert record["pipes_from"] == {name: "measured" for name in H200_PIPES}, \
        record["pipes_from"]  # NVRTC through torch compiled and ran every pipe kernel
    assert pipes["hfma2"] > pipes["fma"] > pipes["int"] > pipes["mufu"]
    assert pipes["smem"] > l2 > dram
    assert flops["bf16"] > pipes["hfma2"]  # the tensor cores beat the FP16 pipe
    if "H200" in data["key"]["device_name"]:
        for name, (low, high) in H200_PIPES.items():
            assert low <= pipes[name] <= high, (name, pipes[name])
        assert dram == pytest.approx(H200_COPY_BYTES_PER_S, rel=0.10)
        # cuBLAS bf16 on the H200: 793e12 at 4096^3, 665e12 at 8192^3 under the power cap
        # (2026-12-03; the datasheet says 989e12 dense). The ceiling is the faster.
        assert flops["bf16"] == pytest.approx(H200_BF16_FLOPS_PER_S, rel=0.15)
        assert flops["fp8"] > flops["bf16"]  # Hopper's fp8 tensor cores

    again = run_krung(gpu_store, "calibrate", "--json")
    assert again.code == 0, again.stderr
    assert again.json()["cached"] is True and again.json()["record"] == record
    text = run_krung(gpu_store, "calibrate")
    assert "(kept in the store," in text.stdout.splitlines()[0]
    assert text.stdout.splitlines()[2].split()[0] == "dram"


@pytest.mark.parametrize(("problem", "version", "bound"), BUILTIN_VERSIONS,
                         ids=[p for p, _, _ in BUILTIN_VERSIONS])
def test_the_roofline_verdict_for_a_builtin_problem(gpu_store, problem, version, bound):
    result = run_krung(gpu_store, "run", problem, PROBLEMS / problem / "solutions" / version,
                       "--json")
    run = result.json()
    rungs = {r["name"]: r for r in run["rungs"]}
    roofline = rungs["roofline"]
    print(f"\n{problem}/{version}: {roofline['status']} {roofline.get('error') or ''}")
    print(json.dumps({k: v for k, v in roofline["figures"].items() if k != "ceilings"},
                     indent=1))
    assert result.code == 0, [(r["name"], r["error"]) for r in run["rungs"] if r["error"]]
    figures = roofline["figures"]
    assert figures["verdict"] in ("at-roofline", "below")
    assert figures["ceilings_from"].startswith("measured ")
    assert figures["threshold_pct"] == 90
    rows = figures["per_case"]
    assert [r["case"] for r in rows] == [r["case"] for r in rungs["benchmark"]["figures"][
        "per_case"]]
    for row in rows:
        assert 0 < row["pct"] <= 100 * (1 + SUSPECT_MARGIN)
        assert row["bound"] == bound and row["limiter"]
        assert row["median_us_at_max_clock"] <= row["median_us"]
        assert row["median_us_at_max_clock"] >= row["roofline_us"] / (1 + SUSPECT_MARGIN)
        # the artifacts rung ran: the SASS chose the compute ceiling, not the dtype
        assert row["ceiling_chosen_by"].startswith("SASS: ") and not row["ceiling_assumed"]
        if problem == "matmul":
            assert row["precision"] == "bf16" and row["ceiling"] == "bf16"
            assert row["ceiling_chosen_by"].startswith("SASS: HGMMA")
        else:
            assert row["ceiling"] == "dram"
            assert row["compute_ceiling"] in ("fma", "hfma2", "mufu", "int", "issue")
        assert row["profiled"] is False
        if row["verdict"] == "below":
            assert "no profile (`--rungs +profile`" in row["limiter"]
    assert figures["next_step"].startswith(("beat ", "every bench case is at the roofline"))
    print("next_step:", figures["next_step"])
    agent = run_krung(gpu_store, "show", run["run_id"], "--format", "agent").stdout
    assert any(line.startswith("roofline: ") for line in agent.splitlines())


def test_first_use_calibrates_then_history_and_report(tmp_path):
    store = tmp_path / "fresh" / "krung.db"
    store.parent.mkdir()
    version = PROBLEMS / "vector_add" / "solutions" / "triton_blocked.py"
    rungs = "static,compile,run,benchmark,roofline"
    first = run_krung(store, "run", "vector_add", version, "--rungs", rungs, "--json")
    assert first.code == 0, first.stderr
    figures = {r["name"]: r for r in first.json()["rungs"]}["roofline"]["figures"]
    assert figures["ceilings_from"].startswith("measured now")
    kept = run_krung(store, "calibrate", "--list", "--json").json()
    assert len(kept) == 1 and kept[0]["key"]["device_name"] == first.json()["device"]

    second = run_krung(store, "run", "vector_add", version, "--rungs", rungs, "--json").json()
    roofline = {r["name"]: r for r in second["rungs"]}["roofline"]["figures"]
    assert roofline["ceilings_from"].endswith("(kept in the store)")
    assert second["parent"] == first.json()["run_id"]

    history = run_krung(store, "history", "vector_add", "--json").json()
    assert [h["parent"] for h in history] == [first.json()["run_id"], None]
    assert all(h["pct_of_roofline"] > 0 for h in history)
    assert history[0]["time_change"] is not None

    pngs = ["--png", tmp_path / "png"] if importlib.util.find_spec("matplotlib") else []
    made = run_krung(store, "report", "vector_add", "-o", tmp_path / "report.html", *pngs)
    assert made.code == 0, made.stderr
    page = (tmp_path / "report.html").read_text()
    assert 'id="roofline-chart"' in page and 'id="timeline-chart"' in page
    assert page.count("% of the roofline (memory-bound") == 4  # 2 versions x 2 bench cases
    browser = find_browser()
    if browser is not None:
        check = check_page(browser, tmp_path / "report.html", tmp_path / "profile")
        assert check.problems == []
        assert {c["id"] for c in check.charts} == {"roofline-chart", "timeline-chart"}
