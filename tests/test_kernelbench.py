"""KernelBench problems run as they are: ModelNew loaded with the reference Model's random
weights, inputs from get_inputs() under fresh seeds, KernelBench's tolerance for the
precision plus krung's metrics, and krung's whole ladder over it."""

from __future__ import annotations

import pytest
import torch

from krung.judge.problem.kernelbench import input_sizes, redraw
from krung.judge.problem.native import import_file
from tests.conftest import KERNELBENCH, write

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
    assert correctness["per_case"][0]["case"] == "batch_size=16,dim=1000,dtype=float32"
    assert correctness["unseen_cases"] == 1
    assert correctness["per_case"][1]["case"].endswith("(unseen)")
    assert rungs["benchmark"]["figures"]["per_case"][0]["ref_median_us"] > 0


@pytest.mark.parametrize("name, rung, error_type, words", [
    # right on the declared (16, 1000) only: the unseen batch size finds it out
    ("1_ReLU", "correctness", "RuntimeError", "(unseen)"),
    # the layer under another name: the reference's weights have nowhere to go
    ("3_Linear", "compile", "ParameterMismatch", "missing linear.bias, linear.weight"),
    # ignores the LayerNorm's weight and bias: right only for their defaults, which krung
    # replaces with random values
    ("4_LayerNorm", "correctness", "Mismatch", "elements outside atol=0.0001 rtol=0.0001"),
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
    assert correctness["per_case"][0]["case"] == "batch_size=24,dtype=bfloat16"
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
    problem, solution = KERNELBENCH / "3_Linear.py", KERNELBENCH / "solutions" / "3_Linear.py"
    fp32 = krung("run", problem, solution, "--rungs", CHECKS, "--json").json()
    bf16 = krung("run", problem, solution, "--precision", "bf16", "--rungs", CHECKS,
                 "--json").json()
    assert (fp32["problem"], bf16["problem"]) == ("3_Linear", "3_Linear@bf16")
    assert bf16["parent"] is None  # not the fp32 run of the same file
    again = krung("run", problem, solution, "--precision", "bf16", "--rungs", CHECKS,
                  "--json").json()
    assert again["parent"] == bf16["run_id"]
    by_name = krung("history", "3_Linear@bf16", "--json").json()
    assert [e["run_id"] for e in by_name] == [again["run_id"], bf16["run_id"]]
    by_path = krung("history", f"{problem}@bf16", "--json").json()
    assert by_path == by_name
    assert [e["run_id"] for e in krung("history", problem, "--json").json()] == \
        [fp32["run_id"]]
