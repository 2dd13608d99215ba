"""On a CPU the artifacts rung also compiles what the GPU-sized bench cases launch: their
inputs made as shapes on the meta device, the version called on them with every Triton launch
noted and none run; every specialisation says which cases launch it."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from krung.judge.rungs.artifacts.cases import decode, encode, meta_device
from tests.conftest import PROBLEMS
from tests.test_spec import TRITON_GOOD

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


def test_cpu_artifacts_compile_the_softmax_bench_cases_kernels(krung):
    solution = PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py"
    done = krung("run", "softmax", solution, "--rungs", "static,compile,run,artifacts", "--json")
    assert done.code == 0, done.stderr
    run = done.json()
    rung = next(r for r in run["rungs"] if r["name"] == "artifacts")
    assert rung["status"] == "ok", rung
    rows = rung["figures"]["per_kernel"]
    by_case = {case: row for row in rows for case in row["cases"]}
    # 4096 fp32 rows: BLOCK=4096 with 8 warps, a specialisation no test case launches
    bench = by_case["rows=4096,cols=4096,dtype=float32 (bench)"]
    assert bench["specialisation"].startswith("BLOCK=4096_fp32_w8s3_"), bench
    assert bench["ran"] is False and bench["cases"] == ["rows=4096,cols=4096,dtype=float32 (bench)"]
    assert bench["registers"] > 0 and bench["threads_per_block"] == 256
    assert {"ptx", "cubin", "sass"} <= set(bench["files"])
    for case in ("rows=8192,cols=8192,dtype=float32 (bench)",
                 "rows=8192,cols=8192,dtype=bfloat16 (bench)",
                 "rows=32768,cols=1000,dtype=bfloat16 (bench)"):
        assert by_case[case]["ran"] is False or "(test)" in " ".join(by_case[case]["cases"])
    assert by_case["rows=8192,cols=8192,dtype=float32 (bench)"]["specialisation"].startswith(
        "BLOCK=8192_fp32_w16s3_")
    # what the worker ran is attributed too: the run rung's case, by its shapes
    ran = [row for row in rows if row["ran"]]
    assert ran and all(row["launches"] >= 1 and row["cases"] for row in ran), ran
    assert any("(test)" in case for row in ran for case in row["cases"])
    # bench cases first: they are what the GPU times
    assert rows[0]["ran"] is False
    sass = krung("artifacts", run["run_id"], "--kind", "sass")
    assert sass.code == 0, sass.stderr
    section = sass.stdout.split(f"==> {bench['files']['sass']} <==")[1]
    assert section.lstrip().startswith("// krung: softmax_kernel BLOCK=4096_fp32_w8s3_")
    assert "rows=4096,cols=4096,dtype=float32 (bench)" in section.split("Function")[0]
    assert "not run on this machine" in section.split("Function")[0]
    assert "LDG.E" in section
    ptx = krung("artifacts", run["run_id"], "--name", bench["files"]["ptx"])
    assert ".target sm_90a" in ptx.stdout and ".entry softmax_kernel" in ptx.stdout


# The entry reads a value of its input before it launches on a bench case's size.
NEEDS_VALUES_WHEN_LARGE = TRITON_GOOD.replace("def kernel(x):", "def launch(x):") + '''

def kernel(x):
    if x.numel() > 100_000 and float(x.abs().max()) > 1e30:  # a value: meta has none
        return x * 2 + 1
    return launch(x)
'''


def test_a_bench_case_whose_launch_needs_values_is_named_and_the_rung_passes(
        krung, scale_problem, version):
    path = version("needs_values", NEEDS_VALUES_WHEN_LARGE)
    done = krung("run", scale_problem, path, "--rungs", "static,compile,run,correctness,artifacts",
                 "--json")
    assert done.code == 0, done.stderr
    rung = next(r for r in done.json()["rungs"] if r["name"] == "artifacts")
    assert rung["status"] == "ok", rung
    rows = rung["figures"]["per_kernel"]
    missing = [r for r in rows if r.get("error_kind") == "not_compiled"]
    assert len(missing) == 1, rows
    assert "bench case n=1048576,dtype=float32" in missing[0]["error"]
    assert "meta tensors" in missing[0]["error"], missing[0]["error"]
    compiled = [r for r in rows if not r.get("error")]
    assert compiled and all(r["ran"] and r["cases"] for r in compiled), compiled


def test_inputs_travel_as_shapes_and_come_back_as_meta_tensors():
    base = torch.randn(6, 10)
    inputs = (base[1:, 2:].t(), {"w": torch.ones(3, dtype=torch.bfloat16), "k": 7},
              [torch.zeros(0, 4), 2.5, None, "mode"])
    shapes = json.loads(json.dumps(encode(inputs)))
    back = decode(shapes)
    assert isinstance(back, tuple) and isinstance(back[2], list)
    view = back[0]
    assert view.device.type == "meta" and view.shape == (8, 5) and view.stride() == (1, 10)
    assert view.storage_offset() == 12 and view.dtype == torch.float32
    assert back[1]["w"].dtype == torch.bfloat16 and back[1]["k"] == 7
    assert back[2][0].shape == (0, 4) and back[2][1:] == [2.5, None, "mode"]
    with pytest.raises(TypeError, match="cannot be described by shape"):
        encode((torch.float32,))


def test_a_generator_naming_a_device_and_a_seed_makes_meta_tensors():
    def make_inputs(case, seed, device):
        g = torch.Generator(device="cpu").manual_seed(seed)
        x = 3.0 * torch.randn((case["rows"], case["cols"]), generator=g, device=device)
        w = torch.empty(case["cols"], device="cuda").uniform_(generator=g)
        return x.to(device, torch.bfloat16), w.cuda(), torch.arange(5).cpu()

    with meta_device():
        x, w, index = make_inputs({"rows": 1 << 16, "cols": 1 << 16}, 1, "cpu")
    assert (x.device.type, w.device.type, index.device.type) == ("meta",) * 3
    assert x.shape == (1 << 16, 1 << 16) and x.dtype == torch.bfloat16  # 8 GiB: never made
    assert torch.randn(2).device.type == "cpu"  # the mode ends with its block


# In a fresh process, so that nothing has imported torch._dynamo yet.
META_OPS_WITHOUT_DYNAMO = """
import json, sys
import torch
from krung.judge.rungs.artifacts.cases import dynamo_not_imported, meta_device

def shapes():
    x = 3.0 * torch.randn(64, 48, device="cuda")
    y = torch.nn.functional.gelu(x.softmax(-1)) * x.sum(-1, keepdim=True)
    z = torch.where(x > 0, x, -x).clamp(0, 1).to(torch.bfloat16) @ x.T.to(torch.bfloat16)
    return [[list(t.shape), list(t.stride()), str(t.dtype), t.device.type] for t in (y, z)]

with meta_device(), dynamo_not_imported():
    before = shapes()
imported = "torch._dynamo" in sys.modules
with meta_device():
    after = shapes()  # as torch does it: the references disabled through torch._dynamo
print(json.dumps({"before": before, "after": after, "imported": imported,
                  "imported_after": "torch._dynamo" in sys.modules}))
"""


def test_meta_ops_import_no_dynamo_and_give_what_torch_gives():
    done = subprocess.run([sys.executable, "-c", META_OPS_WITHOUT_DYNAMO], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["imported"] is False
    assert seen["before"] == seen["after"]
    assert seen["before"][1] == [[64, 64], [64, 1], "torch.bfloat16", "meta"]
    assert seen["imported_after"] is True  # out of the block, torch's wrappers as they were


AUTOTUNED_MODEL = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2),
                          triton.Config({"BLOCK": 1024}, num_warps=8)], key=["n"])
@triton.jit
def scale_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(w_ptr), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = torch.nn.Linear(features, features)

    def forward(self, x):
        y = self.linear(x)
        out = torch.empty_like(y)
        grid = lambda meta: (triton.cdiv(y.numel(), meta["BLOCK"]),)
        scale_kernel[grid](y, self.linear.weight, out, y.numel())
        return out
'''


def test_dry_launches_note_a_meta_models_launches_without_running_them(tmp_path):
    """In-process, as the build process does it: a KernelBench model made on the meta device
    (a 16384x16384 Linear, never allocated), its autotuned kernel noted with the first config."""
    from krung.judge.rungs.artifacts.triton_backend import dry_launches, with_cases

    module = types.ModuleType("krung_version")
    path = tmp_path / "model_new.py"
    path.write_text(AUTOTUNED_MODEL)
    module.__file__ = str(path)
    sys.modules["krung_version"] = module
    try:
        exec(compile(AUTOTUNED_MODEL, str(path), "exec"), module.__dict__)
        entry = {"kind": "module", "name": "ModelNew", "init_inputs": encode([16384]),
                 "dtype": "float16"}
        cases = [{"kind": kind, "label": f"batch={batch}",
                  "inputs": encode((torch.empty(batch, 16384, device="meta",
                                                dtype=torch.float16),))}
                 for kind, batch in (("bench", 4096), ("test", 3))]
        noted, failed = dry_launches(entry, cases)
    finally:
        del sys.modules["krung_version"]
    assert failed == []
    assert [len(c["launches"]) for c in noted] == [1, 1]
    launch = noted[0]["launches"][0]
    assert launch["name"] == "scale_kernel" and launch["qualname"] == "scale_kernel"
    assert launch["kwargs"]["BLOCK"] == {"param": 256} and launch["kwargs"]["num_warps"] == 2
    assert launch["args"][0] == {"tensor": "float16", "aligned": True}
    assert launch["grid"] == [4096 * 16384 // 256]
    merged = with_cases([], noted)
    assert [m["cases"] for m in merged] == [["batch=4096 (bench)", "batch=3 (test)"]]
    assert merged[0]["ran"] is False and merged[0]["launches"] is None


def test_with_cases_names_the_cases_of_what_ran_and_orders_bench_first():
    from krung.judge.rungs.artifacts.triton_backend import with_cases

    def launch(block: int, count: int | None = 1) -> dict:
        return {"module": "krung_version", "qualname": "k", "name": "k", "args": [],
                "kwargs": {"BLOCK": {"param": block}}, "launches": count, "grid": [1]}

    ran = [launch(16, 3), launch(64, 2)]
    noted = [{"kind": "test", "label": "n=10", "launches": [launch(16), launch(32)]},
             {"kind": "bench", "label": "n=9000", "launches": [launch(1024), launch(64)]},
             {"kind": "cpu bench", "label": "n=90", "launches": [launch(64)]}]
    merged = with_cases(ran, noted)
    assert [(m["kwargs"]["BLOCK"]["param"], m["ran"], m["launches"]) for m in merged] == [
        (64, True, 2), (1024, False, None), (16, True, 3)]  # 32: a test case's, never run
    assert merged[0]["cases"] == ["n=9000 (bench)", "n=90 (cpu bench)"]
    assert merged[2]["cases"] == ["n=10 (test)"]


@pytest.mark.parametrize("problem", ["gpumode/vectoradd_py", "gpumode/rowsoftmax_py",
                                     "kernelbench/3_Linear.py"])
def test_every_format_makes_its_cases_as_shapes(problem):
    """GPU MODE's generator (which runs its reference to learn the output buffers) and
    KernelBench's get_inputs() make meta inputs for every case; the bench cases come first."""
    from pathlib import Path

    from krung.judge.problem import load_problem
    from krung.judge.rungs.artifacts.cases import dry_cases

    loaded = load_problem(Path(__file__).parent / "data" / problem)
    context = types.SimpleNamespace(problem=loaded, seed_for=lambda *parts: 5)
    cases, entry, unmade = dry_cases(context)
    assert unmade == [] and entry is not None
    bench = [c for c in cases if c["kind"] == "bench"]
    assert len(bench) == len(loaded.bench_cases) and cases[:len(bench)] == bench
    shapes = [leaf for c in bench for leaf in json.dumps(c["inputs"]).split('"meta"')[1:]]
    assert shapes, bench  # tensors travel as shapes, not values
