"""The torch.compile baseline of the benchmark rung (`--vs-compiled`): inductor really
compiles here (a C++ compiler on the CPU)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from krung.judge.rungs.benchmark import CPU_PLAN, CompiledBaseline
from tests.conftest import GOOD, SCALE_PROBLEM, write

# Importing inductor warns of torch.jit deprecations in torch itself (the suite makes warnings
# errors); the CLI tests run the judge in its own process, where they are only warnings.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _scale(x):
    return x * 2 + 1


@pytest.mark.slow  # torch.compile (inductor builds C++) of every case afresh
@torch._dynamo.config.patch(recompile_limit=2)
def test_every_case_is_compiled_afresh_whatever_the_recompile_limit():
    # Dynamo runs a function uncompiled once it hit its recompile limit (8), silently: shared
    # across bench cases, the "compiled" figures of later cases would be eager ones.
    baseline = CompiledBaseline(_scale)
    for dtype, shape in [(torch.float32, (64,)), (torch.float64, (8, 8)),
                         (torch.float32, (4, 4, 4))]:
        compiled_before = counters["frames"]["ok"]
        sets = [(torch.randn(shape, dtype=dtype) + 3,) for _ in range(2)]
        compiled = baseline.warm(sets[0])
        assert counters["frames"]["ok"] == compiled_before + 1, (dtype, shape)
        assert baseline.time(compiled, sets, "cpu", CPU_PLAN) is not None, baseline.error
    assert baseline.error is None and baseline.figures()["compiled_warm_up_s"] > 0


@pytest.mark.slow  # torch.compile (inductor builds C++) of the reference
def test_a_recompile_inside_the_timing_is_an_error_not_a_figure():
    baseline = CompiledBaseline(_scale)
    compiled = baseline.warm((torch.randn(64) + 3,))
    assert compiled is not None, baseline.error
    assert baseline.time(compiled, [(torch.randn(65) + 3,)], "cpu", CPU_PLAN) is None
    assert "Recompil" in baseline.error and "compiled_error" in baseline.figures()
    assert baseline.warm((torch.randn(64) + 3,)) is None  # and the baseline stays off


@pytest.mark.slow  # torch.compile (inductor builds C++) of every case's reference
def test_vs_compiled_times_torch_compile_of_the_reference_too(krung, scale_problem, version,
                                                              shared_runs):
    # Inductor really compiles the reference here (a C++ compiler on the CPU).
    result = krung("run", scale_problem, version("good", GOOD), "--json", "--vs-compiled",
                   "--rungs", "correctness,benchmark")
    assert result.code == 0, result.stderr
    bench = next(r for r in result.json()["rungs"] if r["name"] == "benchmark")
    figures = bench["figures"]
    assert "compiled_error" not in figures and figures["compiled_warm_up_s"] > 0
    for row in figures["per_case"]:
        assert row["compiled_median_us"] > 0
        assert row["speedup_vs_compiled"] == pytest.approx(
            row["compiled_median_us"] / row["median_us"])
    assert figures["speedup_vs_compiled"] > 0
    plain = shared_runs.run("good", GOOD)  # the same problem and version, without the option
    plain_bench = next(r for r in plain.json()["rungs"] if r["name"] == "benchmark")
    assert "speedup_vs_compiled" not in plain_bench["figures"]  # only when asked


def test_a_reference_torch_compile_cannot_build_is_reported_not_fatal(
        krung, scale_problem, version, tmp_path):
    # Inductor on a CPU needs a C++ compiler: here the one it is told to use does not exist.
    missing = tmp_path / "no-such-c++"
    result = krung("run", scale_problem, version("good", GOOD), "--json",
                   "--rungs", "correctness,benchmark",
                   env={"KRUNG_COMPILED_BASELINE": "1", "CXX": str(missing)})
    assert result.code == 0, result.stderr
    figures = next(r for r in result.json()["rungs"] if r["name"] == "benchmark")["figures"]
    assert figures["compiled_error"], figures
    assert figures["speedup"] > 0 and "speedup_vs_compiled" not in figures["per_case"][0]



RAISES_WHEN_TIMED = SCALE_PROBLEM.replace(
    "    def reference(x):\n        return x * 2 + 1",
    """    _compiled_calls = [0]

    @torch._dynamo.disable
    def _count_compiled_call():
        _compiled_calls[0] += 1
        if _compiled_calls[0] > 1:  # after the warm-up: as an out-of-memory would
            raise RuntimeError("the compiled reference failed while timed")

    def reference(x):
        if torch.compiler.is_compiling():
            _count_compiled_call()
        return x * 2 + 1""")


def test_a_compiled_reference_failing_while_timed_is_reported_not_fatal(
        krung, version, tmp_path):
    assert "_count_compiled_call" in RAISES_WHEN_TIMED
    problem = write(tmp_path / "raises" / "problem.py", RAISES_WHEN_TIMED).parent
    result = krung("run", problem, version("good", GOOD), "--json", "--vs-compiled",
                   "--rungs", "correctness,benchmark")
    assert result.code == 0, result.stderr
    figures = next(r for r in result.json()["rungs"] if r["name"] == "benchmark")["figures"]
    assert "failed while timed" in figures["compiled_error"], figures
    assert "speedup_vs_compiled" not in figures and figures["speedup"] > 0
