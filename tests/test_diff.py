"""Two runs compared: the source diff and the figure deltas per rung, through a real store."""

from __future__ import annotations

import pytest

import krung
from krung import Run, RungResult, Status


def bench(median_a: float, median_b: float) -> list[dict]:
    return [{"case": "n=1", "median_us": median_a, "ref_median_us": 10.0, "speedup": 10 / median_a},
            {"case": "n=2", "median_us": median_b, "ref_median_us": 20.0, "speedup": 20 / median_b}]


def make_run(db: krung.Store, source: str, geomean: float, rows: list[dict],
             error: float) -> Run:
    run = Run(run_id="", problem="p", problem_path="/p", solution="/v/k.py",
              source_sha256=str(hash(source) % 10**8).rjust(64, "0"), source=source,
              device="cpu")
    db.begin(run, ["correctness", "benchmark"])
    run.rungs = [
        RungResult("correctness", Status.OK, figures={"max_abs_err": error, "cases": 2,
                                                      "per_case": [{"case": "n=1",
                                                                    "max_abs_err": error}]}),
        RungResult("benchmark", Status.OK, figures={"geomean_us": geomean, "timer": "cpu-wall",
                                                    "per_case": rows}),
    ]
    for position, rung in enumerate(run.rungs):
        db.add_rung(run.run_id, position, rung)
    db.finish(run)
    return run


def test_diff_of_two_stored_runs(store):
    db = krung.Store(store)
    old = make_run(db, "def kernel(x):\n    return x + 1\n", 30.0, bench(20.0, 40.0), 0.0)
    new = make_run(db, "def kernel(x):\n    return x.add(1)\n", 20.0, bench(10.0, 40.0), 1e-6)
    db.close()

    diff = krung.diff_runs(old.run_id[:5], new.run_id, store=store)
    assert diff["a"]["run_id"] == old.run_id and diff["b"]["run_id"] == new.run_id
    assert diff["same_source"] is False
    assert "-    return x + 1\n+    return x.add(1)\n" in diff["source_diff"]
    rungs = {r["name"]: r for r in diff["rungs"]}
    assert rungs["correctness"]["figures"]["max_abs_err"] == {"a": 0.0, "b": 1e-6,
                                                              "delta": 1e-6}
    geomean = rungs["benchmark"]["figures"]["geomean_us"]
    assert geomean["delta"] == -10.0 and geomean["ratio"] == pytest.approx(2 / 3)
    first, second = rungs["benchmark"]["per_case"]
    assert first["case"] == "n=1" and first["median_us"]["ratio"] == 0.5
    assert first["speedup"] == {"a": 0.5, "b": 1.0, "delta": 0.5, "ratio": 2.0}
    assert second["median_us"]["delta"] == 0
    assert diff["summary"] == (f"{new.run_id} is 1.5x faster than {old.run_id} (geomean of "
                               "bench-case medians)")

    same = krung.diff_runs(old.run_id, old.run_id, store=store)
    assert same["same_source"] is True and same["source_diff"] == ""


MASKED = '''
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = {mask}
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)
'''


def _sass_of(tmp_path, mask: str) -> tuple[str, str]:
    """The SASS (cuobjdump's, as the artifacts rung keeps it) of the kernel with this mask,
    compiled for sm_90a here, and its function's symbol."""
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from krung.judge.rungs.artifacts import sass, tools

    module_path = tmp_path / f"k{abs(hash(mask))}.py"
    module_path.write_text(MASKED.format(mask=mask))
    spec = importlib.util.spec_from_file_location(module_path.stem, module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compiled = triton.compile(
        ASTSource(module.add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                      "n": "i32", "BLOCK": "constexpr"}, {(4,): 256}),
        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    cubin = tmp_path / f"{module_path.stem}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    tool = tools.find("cuobjdump")
    if tool is None:
        pytest.skip("no cuobjdump (Triton's package ships one)")
    text = sass.clean(tools.run(tool, ["-sass", str(cubin)]).stdout)
    return text, next(iter(sass.split_functions(text)))


def test_the_sass_diff_keeps_guard_predicates(tmp_path, store):
    """A tail mask dropped is a guard predicate gone from the loads and stores: the diff must
    show `@P0 LDG...` against `LDG...`, not two identical lines."""
    db = krung.Store(store)
    runs = []
    for mask in ("offs < n", "None"):
        text, symbol = _sass_of(tmp_path, mask)
        run = make_run(db, f"# mask = {mask}\n", 10.0, bench(10.0, 10.0), 0.0)
        folder = db.artifacts_dir(run.run_id) / "artifacts" / "add_kernel"
        folder.mkdir(parents=True)
        (folder / "s.sass").write_text(text)
        run.rungs.append(RungResult("artifacts", Status.OK, figures={"per_kernel": [
            {"kernel": "add_kernel", "function": "add_kernel", "symbol": symbol,
             "specialisation": "s", "files": {"sass": "artifacts/add_kernel/s.sass"}}]}))
        db.add_rung(run.run_id, len(run.rungs) - 1, run.rungs[-1])
        runs.append(run)
    db.close()
    diff = krung.diff_runs(runs[0].run_id, runs[1].run_id, kinds=("sass",), store=store)
    (kernel,) = diff["kernels"]
    changed = [line for line in kernel["sass_diff"].splitlines()
               if line[:1] in "+-" and not line.startswith(("---", "+++"))]
    guarded = [line for line in changed if line.startswith("-@")]
    assert any("LDG" in line for line in guarded), kernel["sass_diff"]
    assert any("STG" in line for line in guarded), kernel["sass_diff"]
    # the same loads without their guard are on the other side
    assert any(line.startswith("+LDG") for line in changed), kernel["sass_diff"]
    assert not any(line.lstrip("+-").startswith("/*") for line in changed)  # no addresses
