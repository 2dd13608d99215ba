"""One example version per DSL through the whole ladder on a GPU, and what each DSL adds:
torch's CUDA C++ build cache and compile errors, the autotuner's choice. Each test skips,
saying why, when its DSL is not importable here. `-s` prints the figures."""

from __future__ import annotations

import importlib.util
import json

import pytest

import krung
from tests.conftest import BROKEN_CUDA as BROKEN
from tests.conftest import PROBLEMS

pytestmark = pytest.mark.gpu

SOLUTIONS = PROBLEMS / "vector_add" / "solutions"
LADDER = "static,compile,run,correctness,determinism,benchmark,artifacts"


def needs(*modules: str) -> None:
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (scripts/install_dsl_wheels.sh installs "
                        "CuTeDSL and TileLang from staged wheels)")


def climb(store, name: str, rungs: str = LADDER) -> krung.Run:
    run = krung.evaluate("vector_add", SOLUTIONS / name, store=store, device="cuda",
                         rungs=rungs)
    lines = "\n".join(r.line() + (f"\n  {r.details}" if r.details else "") for r in run.rungs)
    print(f"\n{name}:\n{lines}")
    assert run.ok, lines
    for rung in run.rungs:
        assert rung.ok, rung.line()
    if run.rung("benchmark") is None:  # a shorter ladder
        return run
    bench = run.rung("benchmark").figures
    print(json.dumps({"geomean_us": bench["geomean_us"], "speedup": bench["speedup"],
                      "per_case": [{k: r.get(k) for k in ("case", "median_us", "speedup",
                                                          "config")}
                                   for r in bench["per_case"]]}, indent=1))
    return run


@pytest.mark.parametrize("name, modules", [
    ("cuda_inline.py", ("ninja",)),
    ("cuda_file.py", ("ninja",)),
    ("cupy_raw.py", ("cupy",)),
    ("numba_jit.py", ("numba",)),
    ("cutedsl.py", ("cutlass",)),
    ("tilelang_jit.py", ("tilelang",)),
    ("triton_autotuned.py", ("triton",)),
])
def test_each_dsl_example_passes_the_whole_ladder(store, name, modules):
    needs(*modules)
    run = climb(store, name)
    assert run.rung("compile").figures["first_call_s"] > 0
    kernels = run.rung("artifacts").figures.get("kernels")
    print(f"artifacts: {kernels} kernel(s)")
    if name in ("cuda_inline.py", "cuda_file.py", "cupy_raw.py", "cutedsl.py",
                "tilelang_jit.py", "triton_autotuned.py"):
        assert kernels >= 1  # CuTeDSL's: the PTX and CUBIN it kept as it ran
    if name == "tilelang_jit.py":  # its CUDA source, and what that compiles to
        figures = run.rung("artifacts").figures
        assert "TileLang" in figures["source"]
        assert all({"cu", "ptx", "cubin", "sass"} <= set(r["files"]) and r["registers"] > 0
                   for r in figures["per_kernel"]), figures["per_kernel"]


def test_cuda_inline_builds_once_in_the_store_cache(store):
    needs("ninja")
    rungs = "static,compile,run"
    first = climb(store, "cuda_inline.py", rungs).rung("compile").figures
    second = climb(store, "cuda_inline.py", rungs).rung("compile").figures
    print("first build:", first, "\nsecond build:", second)
    assert second["build_cache"] == "hit"
    assert second["build_s"] < max(first["build_s"] / 5, 1.0)
    assert first["call_s"] < first["first_call_s"]  # the build is kept apart from the call
    assert (store.parent / "build_cache" / "torch_extensions").is_dir()


def test_a_cuda_build_error_on_the_gpu_names_the_py_line(store, version):
    needs("ninja")
    path = version("broken_gpu", BROKEN)
    run = krung.evaluate("vector_add", path, store=store, device="cuda",
                         rungs="static,compile,run")
    rung = run.rung("compile")
    print(rung.line(), rung.details, sep="\n")
    assert rung.error_type == "CudaCompileError", rung.line()
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "bb[i]" in t)
    assert rung.location == f"{path}:{line}"
    assert 'identifier "bb" is undefined' in rung.error


def test_autotune_on_the_gpu_tunes_before_timing(store):
    needs("triton")
    run = climb(store, "triton_autotuned.py")
    rows = run.rung("benchmark").figures["per_case"]
    for row in rows:
        (tuned,) = row["autotune"]
        assert tuned["key"]["n"] in (2**24, 2**28) and row["config"].startswith("add_kernel:")
        # one kernel per timed call: the autotuner's own launches stayed out of the timing
        assert row["kernels_per_call"] == 1.0, row
    # only the chosen configs' kernels are in the artifacts
    figures = run.rung("artifacts").figures
    chosen = {t["label"].split(" num_stages")[0] for t in figures["autotune"]}
    built = {f"BLOCK={r['specialisation'].split('_')[0].split('=')[1]} num_warps="
             f"{r['specialisation'].split('_w')[1].split('s')[0]}" for r in figures["per_kernel"]}
    assert built <= chosen, (built, chosen)


def test_cuda_artifacts_are_krungs_recompile_for_the_arch_torch_built(store):
    """On a GPU torch builds CUDA C++ for the GPU's own arch (sm_90 on an H200, not sm_90a):
    krung compiles the same sources for the same arch, and says it recompiled them."""
    needs("ninja")
    import torch

    major, minor = torch.cuda.get_device_capability()
    run = climb(store, "cuda_inline.py", "static,compile,run,artifacts")
    figures = run.rung("artifacts").figures
    print(json.dumps(figures, indent=1, default=str)[:3000])
    assert {r["specialisation"] for r in figures["per_kernel"]} == {f"sm_{major}{minor}"}
    assert figures["source"].startswith(f"recompiled by krung with nvcc for sm_{major}{minor}")
    assert "as torch builds them" in figures["source"]
    assert all(r["registers"] > 0 for r in figures["per_kernel"])
