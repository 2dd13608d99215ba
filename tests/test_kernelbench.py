"""KernelBench problems run as they are: ModelNew loaded with the reference Model's random
weights, inputs from get_inputs() under fresh seeds, KernelBench's tolerance for the
precision plus krung's metrics, and krung's whole ladder over it."""

from __future__ import annotations

import json
import random
import re
import sys
import time

import pytest
import torch

from krung.judge.problem.kernelbench import input_sizes, redraw
from krung.judge.problem.native import import_file
from tests.conftest import KERNELBENCH, declared, write

CHECKS = "static,compile,run,correctness"  # enough for a version that fails


def test_run_a_kernelbench_problem_with_a_triton_model(krung):
    result = krung("run", KERNELBENCH / "1_ReLU.py", KERNELBENCH / "solutions" / "1_ReLU.py",
                   "--json")
    assert result.code == 0, result.stderr
    run = result.json()
    assert run["problem"] == "1_ReLU" and run["ok"] is True
    assert run["env"]["problem_format"] == "kernelbench" and run["env"]["precision"] == "fp32"
    rungs = {r["name"]: r for r in run["rungs"]}
    assert rungs["static"]["figures"]["dsl"] == "triton"
    correctness = rungs["correctness"]["figures"]
    # the module-level sizes get_inputs() reads are the case, and unseen neighbours move them
    assert declared(correctness["per_case"][0]["case"]) == "batch_size=16,dim=1000,dtype=float32"
    assert correctness["unseen_cases"] == 1
    assert "(unseen)" in correctness["per_case"][1]["case"]
    assert rungs["benchmark"]["figures"]["per_case"][0]["ref_median_us"] > 0


@pytest.mark.parametrize("name, rung, error_type, words", [
    # right on the declared (16, 1000) only: the unseen batch size finds it out
    ("1_ReLU", "correctness", "RuntimeError", "(unseen)"),
    # the layer under another name: the reference's weights have nowhere to go
    ("3_Linear", "compile", "ParameterMismatch", "missing linear.bias, linear.weight"),
    # ignores the LayerNorm's weight and bias: right only for their defaults, which krung
    # replaces with random values
    ("4_LayerNorm", "correctness", "Mismatch", "elements outside atol="),
])
def test_wrong_models_fail_where_they_are_wrong(krung, name, rung, error_type, words):
    result = krung("run", KERNELBENCH / f"{name}.py", KERNELBENCH / "wrong" / f"{name}.py",
                   "--rungs", CHECKS, "--json")
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    assert (failed["name"], failed["error_type"]) == (rung, error_type)
    assert words in failed["error"]
    assert failed["hint"] or error_type == "RuntimeError"  # the version's own exception


def test_parameter_mismatch_names_both_sides_and_the_fix(krung):
    result = krung("run", KERNELBENCH / "3_Linear.py", KERNELBENCH / "wrong" / "3_Linear.py",
                   "--rungs", "static,compile", "--json")
    compile_rung = result.json()["rungs"][1]
    assert "parameters the reference Model lacks: fc.bias, fc.weight" in compile_rung["error"]
    assert "same attribute names and shapes" in compile_rung["hint"]


def test_bf16_precision_casts_inputs_and_weights(krung):
    result = krung("run", KERNELBENCH / "3_Linear.py", KERNELBENCH / "solutions" / "3_Linear.py",
                   "--precision", "bf16", "--rungs", CHECKS, "--json")
    assert result.code == 0, result.stderr
    run = result.json()
    assert run["env"]["precision"] == "bf16"
    correctness = run["rungs"][3]["figures"]
    assert declared(correctness["per_case"][0]["case"]) == "batch_size=24,dtype=bfloat16"
    assert correctness["psnr_db"] is None or correctness["psnr_db"] > 35


def test_a_version_without_model_new_fails_the_static_rung(krung, version):
    plain = version("plain", "import torch\ndef kernel(x):\n    return torch.relu(x)\n")
    result = krung("run", KERNELBENCH / "1_ReLU.py", plain, "--rungs", "static", "--json")
    assert result.code == 1
    static = result.json()["rungs"][0]
    assert static["error_type"] == "EntryPointMissing"
    assert "defines no class `ModelNew`" in static["error"]
    assert "class ModelNew(torch.nn.Module)" in static["hint"]


def test_precision_is_only_for_kernelbench_and_only_known_ones(krung, scale_problem, version):
    good = version("good", "def kernel(x):\n    return x * 2 + 1\n")
    native = krung("run", scale_problem, good, "--precision", "bf16")
    assert native.code == 2 and "--precision applies to KernelBench problems" in native.stderr
    unknown = krung("run", KERNELBENCH / "1_ReLU.py", good, "--precision", "fp8")
    assert unknown.code == 2 and "hint: use one of: fp32, fp16, bf16" in unknown.stderr


def test_a_broken_kernelbench_file_names_its_defects(krung, tmp_path, version):
    broken = write(tmp_path / "5_Broken.py", """
        import torch
        class Model(torch.nn.Module):
            def __init__(self, width):
                super().__init__()
                self.scale = torch.nn.Parameter(torch.ones(width))
            def forward(self, x):
                return x * self.scale
        def get_inputs():
            return [torch.ones(4, 8)]
        def get_init_inputs():
            return [8]
    """)
    result = krung("run", broken, version("v", "class ModelNew:\n    pass\n"))
    assert result.code == 2
    assert "ProblemError" in result.stderr
    assert "get_inputs() ignores its seed" in result.stderr
    assert "krung seeds torch's global generator" in result.stderr


def test_input_sizes_are_the_globals_only_get_inputs_reads():
    relu = import_file(KERNELBENCH / "1_ReLU.py", "krung_test_relu")
    assert input_sizes(KERNELBENCH / "1_ReLU.py", relu) == {"batch_size": 16, "dim": 1000}
    linear = import_file(KERNELBENCH / "3_Linear.py", "krung_test_linear")
    # in_features shapes the input, but get_init_inputs() reads it too: it stays fixed
    assert input_sizes(KERNELBENCH / "3_Linear.py", linear) == {"batch_size": 24}


def test_redraw_replaces_defaults_and_keeps_positive_ones_positive():
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.LayerNorm(16))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    redraw(model, torch.Generator().manual_seed(torch.seed()))
    after = model.state_dict()
    for name, value in after.items():
        if value.is_floating_point():
            assert not torch.equal(value, before[name]), name
    assert torch.equal(after["1.num_batches_tracked"], before["1.num_batches_tracked"])
    for name in ("1.running_var", "1.weight", "2.weight"):  # defaults of ones
        assert bool((after[name] >= 0.5).all() and (after[name] <= 1.5).all()), name
    assert float(after["2.bias"].abs().max()) <= 0.5 and bool(after["2.bias"].ne(0).all())
    bound = float(before["0.weight"].abs().max())
    assert float(after["0.weight"].abs().max()) <= bound


def test_redraw_in_place_gives_the_values_of_its_formula_bit_for_bit():
    """redraw works in place on its noise (a 2 G-weight model's temporaries cost seconds of
    every setup): the weights are what `default * (0.5 + noise)` and
    `(2 * noise - 1) * bound` give, to the bit, for each floating dtype a model holds."""
    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16,
            torch.float16: torch.int16, torch.float64: torch.int64}
    for dtype, as_int in bits.items():
        seed = random.randrange(1 << 30)
        shape = (random.randint(1, 300), random.randint(1, 70))
        model = torch.nn.Module()
        model.positive = torch.nn.Parameter((torch.rand(shape) + 0.1).to(dtype))
        model.signed = torch.nn.Parameter((torch.randn(shape) * 0.3).to(dtype))
        model.transposed = torch.nn.Parameter((torch.randn(shape) * 0.3).to(dtype).t())
        model.zeros = torch.nn.Parameter(torch.zeros(shape[0], dtype=dtype))
        model.register_buffer("scalar", torch.tensor(-random.random(), dtype=dtype))
        defaults = {k: v.detach().clone() for k, v in model.state_dict().items()}
        redraw(model, torch.Generator().manual_seed(seed))
        generator = torch.Generator().manual_seed(seed)  # the formula, as it stood
        for name, value in model.state_dict().items():
            default = defaults[name].float()
            noise = torch.rand(default.shape, generator=generator)
            if float(default.min()) > 0:
                expected = default * (0.5 + noise)
            else:
                expected = (2 * noise - 1) * (float(default.abs().max()) or 0.5)
            assert torch.equal(value.view(as_int), expected.to(dtype).view(as_int)), (
                name, dtype, seed, shape)


def honest(problem, tmp_path):
    """KernelBench's honest baseline: the problem's own source with `ModelNew = Model`."""
    path = tmp_path / "honest" / f"{problem.stem}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(problem.read_text() + "\n\nModelNew = Model\n")
    return path


def test_unseen_cases_move_the_constants_derived_from_a_size(krung, tmp_path):
    """As level-1 95_CrossEntropyLoss: `input_shape = (num_classes,)`. An unseen case moves
    num_classes, and the scores' width moves with it: the targets stay in range and the
    reference runs (before, the case raised and was dropped without a word)."""
    problem = KERNELBENCH / "5_CrossEntropy.py"
    result = krung("run", problem, honest(problem, tmp_path), "--rungs", CHECKS, "--json",
                   env={"KRUNG_CPU_CHECK_BUDGET": "0"})  # the sizes as declared and moved
    assert result.code == 0, result.stdout + result.stderr
    correctness = result.json()["rungs"][3]["figures"]
    assert correctness["unseen_cases"] == 1 and "unseen_skipped" not in correctness
    declared, unseen = (row["case"] for row in correctness["per_case"] if "stress" not in row)
    assert declared == "batch_size=64,num_classes=40,dtype=float32"
    assert unseen.endswith("(unseen)") and "num_classes=40," not in unseen
    wrong = krung("run", problem, KERNELBENCH / "wrong" / "5_CrossEntropy.py", "--rungs", CHECKS,
                  "--json", env={"KRUNG_CPU_CHECK_BUDGET": "0"})
    failed = wrong.json()["rungs"][3]
    assert wrong.code == 1 and failed["error_type"] == "Mismatch"
    assert [c.endswith("(unseen)") for c in failed["figures"]["failed_cases"]] == [True]


def test_an_unseen_case_moves_only_the_sizes_the_problem_allows(krung, tmp_path):
    """The row length must be even; moving it to an odd neighbour makes the reference raise.
    The unseen case then moves the batch alone and says the length was kept and why (it was
    dropped before, as level-2 3_ConvTranspose3d_Sum_LayerNorm's, whose width its LayerNorm
    ties to a layer's shape)."""
    problem = KERNELBENCH / "7_PairedRows.py"
    result = krung("run", problem, honest(problem, tmp_path), "--rungs", CHECKS, "--json")
    assert result.code == 0, result.stdout + result.stderr
    correctness = result.json()["rungs"][3]["figures"]
    assert correctness["unseen_cases"] == 1 and "unseen_skipped" not in correctness
    checked = next(r["case"] for r in correctness["per_case"] if "(unseen)" in r["case"])
    unseen = declared(checked.replace(" (unseen)", "")) + " (unseen)"  # as derived
    assert re.fullmatch(r"batch_size=(\d+),length=256,dtype=float32 \(unseen\)", unseen), unseen
    assert unseen.split(",")[0] != "batch_size=12"
    note = correctness["unseen_narrowed"]
    assert note.startswith(unseen.removesuffix(" (unseen)") + ": length kept as declared")
    assert "the reference raised RuntimeError" in note
    wrong = krung("run", problem, KERNELBENCH / "wrong" / "7_PairedRows.py", "--rungs", CHECKS,
                  "--json")
    assert wrong.code == 1 and wrong.json()["rungs"][3]["error_type"] == "Mismatch"


def test_an_unseen_case_no_size_of_can_move_is_reported_skipped(krung, tmp_path):
    """Both sizes of the row must stay even: no neighbour the problem can run, and the run
    says which case was skipped and why."""
    source = (KERNELBENCH / "7_PairedRows.py").read_text()
    problem = tmp_path / "7_PairedBoth.py"
    problem.write_text(source.replace("x.view(x.shape[0], -1, 2)", "x.view(-1, 2, x.shape[1] // 2, 2)"))
    result = krung("run", problem, honest(problem, tmp_path), "--rungs", CHECKS, "--json")
    assert result.code == 0, result.stdout + result.stderr
    correctness = result.json()["rungs"][3]["figures"]
    assert correctness["unseen_cases"] == 0 and "unseen_narrowed" not in correctness
    assert correctness["unseen_skipped"].startswith("batch_size=")
    assert "the reference raised RuntimeError" in correctness["unseen_skipped"]


def test_a_reference_that_disagrees_with_itself_is_named_nondeterministic(krung, tmp_path):
    """Dropout in training mode (level-2 66_Matmul_Dropout_Softmax): no version can match,
    the honest baseline included; the failure says why instead of a bare mismatch."""
    problem = KERNELBENCH / "6_MatmulDropout.py"
    result = krung("run", problem, honest(problem, tmp_path), "--rungs",
                   CHECKS + ",determinism", "--json")
    assert result.code == 1
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    failed = rungs["correctness"]
    assert failed["error_type"] == "NondeterministicReference"
    assert "the reference itself is nondeterministic: run twice on the same inputs" in \
        failed["error"]
    assert failed["figures"]["reference_nondeterministic"] is True
    assert "dropout in training mode" in failed["hint"]
    assert rungs["determinism"]["status"] == "skipped"


def test_a_reference_apart_from_itself_by_rounding_holds_versions_to_that_spread(krung,
                                                                                 tmp_path):
    """As level-2 93_ConvTranspose2d_Add_Min_GELU_Multiply on a GPU (cuDNN adds in an order
    that varies): the reference's two runs differ by a few ulps of its largest output, more
    than krung's RMS-scaled atol. The honest baseline passes, held to the reference's own
    spread; a version wrong in one element still fails, as a Mismatch (it was refused as
    NondeterministicReference, whatever the version, and the baseline with it)."""
    problem = KERNELBENCH / "9_RoundingSpread.py"
    result = krung("run", problem, honest(problem, tmp_path), "--rungs",
                   CHECKS + ",determinism,benchmark", "--json")
    assert result.code == 0, result.stdout + result.stderr
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert rungs["benchmark"]["status"] == "ok"  # its timed outputs held to the same spread
    [spread] = rungs["correctness"]["figures"]["reference_spread"]
    assert 0 < spread <= 64 * torch.finfo(torch.float32).eps
    assert rungs["determinism"]["status"] == "skipped"
    assert "nondeterministic by rounding" in rungs["determinism"]["reason"]
    row, column = random.randrange(64), random.randrange(4096)
    wrong = tmp_path / "wrong.py"
    wrong.write_text(problem.read_text() + f"""

class ModelNew(Model):
    def forward(self, ones, small):
        out = super().forward(ones, small)
        out[{row} % out.shape[0], {column} % out.shape[1]] += 1.0
        return out
""")
    failed = krung("run", problem, wrong, "--rungs", CHECKS, "--json")
    assert failed.code == 1, failed.stdout + failed.stderr
    correctness = failed.json()["rungs"][3]
    assert correctness["error_type"] == "Mismatch", correctness
    # its errors were past rounding from the first call: the spread was seen at the end
    [seen] = correctness["figures"]["reference_spread"]
    assert 0 < seen <= 64 * torch.finfo(torch.float32).eps
    assert "the reference itself differs by rounding" in correctness["error"]


def test_a_reference_drawing_random_numbers_skips_the_determinism_check(krung, tmp_path):
    """As level-3 35_LSTM: forward draws its initial state with torch.randn. Its outputs may
    agree bit for bit, but a version that draws too need not be reproducible: determinism is
    skipped, saying why (it failed the honest baseline before)."""
    problem = KERNELBENCH / "8_RandomState.py"
    result = krung("run", problem, honest(problem, tmp_path), "--rungs",
                   CHECKS + ",determinism", "--json")
    assert result.code == 0, result.stdout + result.stderr
    determinism = result.json()["rungs"][4]
    assert determinism["status"] == "skipped"
    assert "every call draws from torch's global random generator" in determinism["reason"]


def test_scale_runs_a_problem_at_smaller_sizes_under_its_own_name(krung, tmp_path):
    """--scale (KRUNG_SCALE) scales the module-level size constants, the derived ones with
    them, and names the problem so its runs keep their own history."""
    problem = KERNELBENCH / "5_CrossEntropy.py"
    baseline = honest(problem, tmp_path)
    result = krung("run", problem, baseline, "--rungs", CHECKS, "--json", "--scale", "0.25")
    assert result.code == 0, result.stdout + result.stderr
    run = result.json()
    assert run["problem"] == "5_CrossEntropy@scale0.25"
    assert run["env"]["scale"] == 0.25
    assert run["env"]["scaled_sizes"] == {"batch_size": "64 -> 16", "num_classes": "40 -> 8",
                                          "input_shape": "(40,) -> (8,)"}
    assert declared(run["rungs"][3]["figures"]["per_case"][0]["case"]) == \
        "batch_size=16,num_classes=8,dtype=float32"
    full = krung("run", problem, baseline, "--rungs", CHECKS, "--json").json()
    assert full["problem"] == "5_CrossEntropy" and full["parent"] is None
    scaled = krung("history", f"{problem}@scale0.25", "--json").json()
    assert [e["run_id"] for e in scaled] == [run["run_id"]]
    bad = krung("run", problem, baseline, env={"KRUNG_SCALE": "2"})
    assert bad.code == 2 and "the scale makes a problem smaller" in bad.stderr
    bad = krung("run", problem, baseline, "--scale", "1.5")
    assert bad.code == 2 and "--scale" in bad.stderr, bad.stderr


WIDE_ROWS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = {rows}
dim = {cols}


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""


def test_a_problem_past_this_machines_memory_is_refused_on_a_cpu_with_the_scale_to_use(
        krung, tmp_path):
    """Declared for a GPU, the inputs alone would fill this machine's memory: refused at
    once, from their shapes (the meta device), with the scale that fits; scaled, it runs."""
    from krung.judge.problem.cpu_fit import available_bytes

    elements = available_bytes() // 4 * random.randint(2, 3)  # float32, in and out
    rows = 1024 * random.randint(1, 4)
    problem = write(tmp_path / "wide" / "9_WideSoftmax.py",
                    WIDE_ROWS.format(rows=rows, cols=elements // rows))
    baseline = honest(problem, tmp_path)
    started = time.monotonic()
    refused = krung("run", problem, baseline, "--rungs", CHECKS, "--format", "agent")
    assert refused.code == 2, refused.stdout + refused.stderr
    assert time.monotonic() - started < 60
    assert "would run out of memory" in refused.stderr, refused.stderr
    assert "--scale 0.01" in refused.stderr, refused.stderr


COUNTED_ROWS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    with open({marker!r}, "a") as calls:  # each time the sizes are told
        calls.write("x")
    return [torch.rand({rows}, {cols}) * 2 - 1]  # an elementwise op: the meta device's slow one


def get_init_inputs():
    return []
"""


def test_a_problems_declared_size_is_told_once_per_text_and_kept_under_the_store(
        krung, store, tmp_path):
    """On a CPU at scale 1 the judge tells a KernelBench problem's sizes from its shapes
    before any rung; it keeps them in the store's build cache by the problem's text, so the
    next turn reads them (an elementwise op on the meta device costs a second): a changed
    problem is told again, and a kept size is what the check goes by."""
    from krung.judge.problem.cpu_fit import check_fits
    from krung.judge.problem.footprint import declared_bytes
    from krung.protocol.errors import UsageError

    marker = tmp_path / "told.txt"
    rows, cols = random.randint(8, 64), random.randint(8, 64)
    problem = write(tmp_path / "counted" / "7_Counted.py",
                    COUNTED_ROWS.format(marker=str(marker), rows=rows, cols=cols))
    baseline = honest(problem, tmp_path)
    told = []  # get_inputs' calls after each run: the size check's, and the rungs' own
    for _ in range(2):
        result = krung("run", problem, baseline, "--rungs", "static", "--json")
        assert result.code == 0, result.stdout + result.stderr
        told.append(len(marker.read_text()))
    assert told[1] - told[0] == told[0] - 1  # the second run's check read the kept size
    footprint = store.parent / "build_cache" / "footprint"
    entries = list(footprint.glob("*.json"))
    assert len(entries) == 1, entries
    kept = json.loads(entries[0].read_text())
    assert kept["bytes"] == 2 * rows * cols * 4  # in and out, float32
    told = told[1]
    write(problem, COUNTED_ROWS.format(marker=str(marker), rows=rows + 1, cols=cols))
    check_fits(problem, 1.0, footprint)
    assert len(marker.read_text()) == told + 1 and len(list(footprint.glob("*.json"))) == 2
    check_fits(problem, 1.0, footprint)
    assert len(marker.read_text()) == told + 1  # kept
    assert declared_bytes(problem, forward=False) == 2 * (rows + 1) * cols * 4
    newest = max(footprint.glob("*.json"), key=lambda e: e.stat().st_mtime_ns)
    newest.write_text(json.dumps({"bytes": 1 << 60}))  # what the check goes by
    with pytest.raises(UsageError, match="would run out of memory"):
        check_fits(problem, 1.0, footprint)
    for broken in ('{"bytes": Infinity}', '{"bytes": -5}', '{"bytes": "5"}', "{"):
        newest.write_text(broken)  # not a size: told again, and kept again
        check_fits(problem, 1.0, footprint)
        assert json.loads(newest.read_text())["bytes"] == 2 * (rows + 1) * cols * 4
    told = len(marker.read_text())
    blocked = tmp_path / "a_file"  # a cache that cannot be written: the check goes on
    blocked.write_text("not a folder")
    check_fits(problem, 1.0, blocked / "footprint")
    assert len(marker.read_text()) == told + 1 and blocked.read_text() == "not a folder"
    assert not list(footprint.glob(".*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_a_first_case_too_big_for_the_interpreter_is_called_at_its_smallest_form(
        krung, tmp_path):
    """On a CPU the compile and run rungs call the first test case as small as the block it
    sets allows, where its declared size would keep the interpreter for minutes: named as
    shrunk, as the correctness rung names its cases."""
    rows, cols = 1024 * random.randint(2, 4), 8192 + 16 * random.randint(1, 100)
    problem = write(tmp_path / "wide" / "8_Softmax.py", WIDE_ROWS.format(rows=rows, cols=cols))
    result = krung("run", problem, honest(problem, tmp_path), "--rungs", CHECKS, "--json")
    assert result.code == 0, result.stdout + result.stderr
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    declared_case = f"batch_size={rows},dim={cols},dtype=float32"
    first = rungs["compile"]["figures"]["first_case"]
    called = re.match(r"batch_size=(\d+),dim=(\d+),dtype=float32 \(shrunk from (.*)\)$", first)
    assert called and called[3] == declared_case, first
    assert 16 <= int(called[1]) < rows and 4096 < int(called[2]) <= cols, first  # same block
    assert rungs["run"]["figures"]["case"] == first
    assert rungs["correctness"]["status"] == "ok"


def test_scaling_keeps_the_model_buildable(tmp_path):
    """Scaled too far a model cannot run (a pooling window larger than the image): the sizes
    of get_inputs() alone are scaled then, and the run records which were kept."""
    from krung.judge.problem.kernelbench import load_kernelbench

    path = write(tmp_path / "8_Pool.py", """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, channels, window):
                super().__init__()
                self.conv = nn.Conv2d(channels, channels, 3, padding=1)
                self.pool = nn.AvgPool2d(window)
            def forward(self, x):
                return self.pool(self.conv(x))
        batch_size = 40
        channels = 16
        window = 6  # too small to scale
        size = 20  # 4 when scaled: smaller than the window
        def get_inputs():
            return [torch.randn(batch_size, channels, size, size)]
        def get_init_inputs():
            return [channels, window]
    """)
    problem = load_kernelbench(path, "fp32", 0.1)
    assert problem.facts["scaled_sizes"] == {"batch_size": "40 -> 8"}
    assert "scaling every size made the reference fail (RuntimeError" in \
        problem.facts["scale_note"]
    assert problem.facts["scale_note"].endswith("channels, size kept as declared")
    assert problem.test_cases == [{"batch_size": 8, "size": 20, "dtype": "float32"}]


def test_the_problem_file_stays_out_of_the_version(krung, version):
    sneaky = version("sneaky", """
        import importlib.util
        import torch
        PATH = "3_Linear.py"
        class ModelNew(torch.nn.Module):
            pass
    """)
    result = krung("run", KERNELBENCH / "3_Linear.py", sneaky, "--rungs", "static", "--json")
    static = result.json()["rungs"][0]
    assert static["error_type"] == "ImportsReference"
    assert "3_Linear.py" in static["error"]




@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_gpu_kernelbench_weights_travel_by_ipc(krung, precision):
    """On the GPU the reference's state dict and init inputs reach the worker by CUDA IPC."""
    result = krung("run", KERNELBENCH / "3_Linear.py", KERNELBENCH / "solutions" / "3_Linear.py",
                   "--device", "cuda", "--precision", precision, "--json")
    assert result.code == 0, result.stderr
    run = result.json()
    assert run["env"]["device"] == "cuda" and run["env"]["precision"] == precision
    bench = {r["name"]: r for r in run["rungs"]}["benchmark"]["figures"]
    assert bench["timer"] in ("cupti", "events")
    case = bench["per_case"][0]
    assert case.get("floor_us", 0) < case["median_us"]  # possible at datasheet peaks


@pytest.mark.gpu
def test_gpu_kernelbench_suite_with_a_compiled_triton_model(krung):
    result = krung("suite", KERNELBENCH, "--solutions", KERNELBENCH / "solutions", "--device",
                   "cuda", "--json", timeout=1200)
    assert result.code == 0, result.stderr
    suite = result.json()
    assert suite["scores"]["correctness"] == 1.0
    assert all(p["speedup"] > 0 for p in suite["problems"])


@pytest.mark.gpu
def test_gpu_kernelbench_wrong_models_fail(krung):
    result = krung("run", KERNELBENCH / "4_LayerNorm.py", KERNELBENCH / "wrong" / "4_LayerNorm.py",
                   "--device", "cuda", "--rungs", CHECKS, "--json")
    assert result.code == 1, result.stderr
    assert result.json()["rungs"][3]["error_type"] == "Mismatch"


def test_each_precision_keeps_its_own_history_parent_and_best(krung, tmp_path):
    """Histories are the host's: the static rung alone makes each run."""
    problem, solution = KERNELBENCH / "3_Linear.py", KERNELBENCH / "solutions" / "3_Linear.py"
    fp32 = krung("run", problem, solution, "--rungs", "static", "--json").json()
    bf16 = krung("run", problem, solution, "--precision", "bf16", "--rungs", "static",
                 "--json").json()
    assert (fp32["problem"], bf16["problem"]) == ("3_Linear", "3_Linear@bf16")
    assert bf16["parent"] is None  # not the fp32 run of the same file
    again = krung("run", problem, solution, "--precision", "bf16", "--rungs", "static",
                  "--json").json()
    assert again["parent"] == bf16["run_id"]
    by_name = krung("history", "3_Linear@bf16", "--json").json()
    assert [e["run_id"] for e in by_name] == [again["run_id"], bf16["run_id"]]
    by_path = krung("history", f"{problem}@bf16", "--json").json()
    assert by_path == by_name
    assert [e["run_id"] for e in krung("history", problem, "--json").json()] == \
        [fp32["run_id"]]


NUMPY_INPUTS = '''
import numpy
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.from_numpy(numpy.random.default_rng(int(torch.randint(1 << 30, ()))).random(
        (64, 32), dtype=numpy.float32))]

def get_init_inputs():
    return []
'''


@pytest.mark.gpu
def test_inputs_drawn_on_the_gpu_are_seeded_and_a_cpu_only_get_inputs_still_works(tmp_path):
    """KRUNG_INPUTS_ON_DEVICE: get_inputs() under torch's default device, on the GPU; the
    same seed gives the same values; one that cannot run there (numpy inside) is drawn on
    the CPU as before."""
    from krung.judge.problem import load_problem

    problem = load_problem(KERNELBENCH / "1_ReLU.py", inputs_on_device=True)
    case = problem.test_cases[0]
    first, again = (problem.make_inputs(case, 7, "cuda") for _ in range(2))
    other = problem.make_inputs(case, 8, "cuda")
    assert first[0].is_cuda and torch.equal(first[0], again[0])
    assert not torch.equal(first[0], other[0])
    numpy_problem = load_problem(write(tmp_path / "9_Numpy.py", NUMPY_INPUTS),
                                 inputs_on_device=True)
    drawn = numpy_problem.make_inputs(numpy_problem.test_cases[0], 7, "cuda")
    assert drawn[0].is_cuda and drawn[0].shape == (64, 32)


OUT_OF_MEMORY_ON_DEVICE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

draws = 0

def on_the_gpu():
    try:
        return torch.get_default_device().type == "cuda"
    except (AssertionError, RuntimeError):  # CUDA asked of a torch without it
        return True

def get_inputs():
    global draws
    draws += 1
    # On the GPU (torch's default device) the card is full of another problem's data; on
    # the CPU the first draw fits and the second does not.
    if on_the_gpu() or draws == 2:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    return [torch.rand(64, 32)]

def get_init_inputs():
    return []
'''


def test_out_of_memory_while_drawing_is_raised_not_drawn_on_the_cpu_nor_a_defect(krung,
                                                                                   tmp_path):
    """A draw on the GPU that runs out of memory is not a get_inputs() that cannot run there:
    drawn on the CPU instead, the same seed gave other values, and a suite's problem beside a
    larger one was refused as not deterministic (46_ and 89_ on an H100) rather than run
    again alone. The out-of-memory is raised, and the run is krung's error that says so."""
    from krung.judge.problem import load_problem

    path = write(tmp_path / "9_Full.py", OUT_OF_MEMORY_ON_DEVICE)
    problem = load_problem(path, inputs_on_device=True)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        problem.make_inputs(problem.test_cases[0], 7, "cuda")
    drawn_in = sys.modules[problem.reference_code.__module__]
    assert drawn_in.draws == 1  # not drawn again on the CPU
    version = write(tmp_path / "solution.py", OUT_OF_MEMORY_ON_DEVICE + "\nModelNew = Model\n")
    result = krung("run", path, version, "--json")
    run = result.json()
    assert result.code == 3 and run["outcome"] == "error", result.stdout + result.stderr
    assert "OutOfMemoryError" in run["error"] and "deterministic" not in run["error"]
