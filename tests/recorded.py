"""GPU-like runs written through the real store API, with figures made by krung's own code
(the roofline rung's case_figures and summarise), for tests of history and the report that
must run where there is no GPU."""

from __future__ import annotations

from krung.host.store import Store
from krung.judge.rungs.roofline import case_figures, ceilings_table, summarise
from krung.judge.rungs.roofline.model import Ceilings
from krung.protocol.results import Run, RungResult, Status

H200 = "NVIDIA H200"
# Ceilings of the order measured on an H200 (copy ~4.3 TB/s, bf16 ~790 TFLOP/s).
H200_RECORD = {
    "dram_bytes_per_s": 4.3e12, "l2_bytes_per_s": 9.6e12, "l2_size_bytes": 50 * 2**20,
    "flops_per_s": {"fp32": 51e12, "tf32": 378e12, "fp16": 800e12, "bf16": 790e12,
                    "fp8": 1450e12},
}
# (label, flops, bytes moved) of a bf16 matmul's bench cases
MATMUL_CASES = [
    (f"M={m},N={n},K={k},dtype=bfloat16", 2 * m * n * k, (m * k + k * n + m * n) * 2)
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 7168, 2048))
]
REFERENCE_US = (190.0, 1450.0, 330.0)  # cuBLAS-like reference times per case


def record_run(store: Store, solution: str, times_us: list[float] | None, *,
               started_at: str, parent: str | None = None, problem: str = "matmul",
               device: str = H200, threshold: float = 90.0) -> Run:
    """Write one finished run: passing with these bench times (roofline placed against
    H200_RECORD), or failing correctness when `times_us` is None."""
    run = Run(run_id="", problem=problem, problem_path=f"/problems/{problem}",
              solution=solution, source_sha256="c0" * 32, device=device,
              source=f"# {solution}\ndef kernel(a, b):\n    ...\n", seed=11,
              started_at=started_at, parent=parent)
    store.begin(run, ["static", "correctness", "benchmark", "roofline"])
    run.rungs = [RungResult("static", Status.OK, figures={"dsl": "triton", "lines": 40},
                            duration_s=0.01)]
    if times_us is None:
        run.rungs.append(RungResult(
            "correctness", Status.FAILED, error="Mismatch: 2/8 test cases fail",
            error_type="Mismatch", hint="compare the failing and the passing sizes",
            location=f"{solution}:12", details="  12 | acc += tl.dot(a, b)\n         ^",
            figures={"cases": 8, "passed": 6, "max_abs_err": 3.5, "max_rel_err": 0.9,
                     "failed_cases": ["M=200,N=129,K=300,dtype=bfloat16"],
                     "per_case": [{"case": "M=200,N=129,K=300,dtype=bfloat16",
                                   "passed": False, "max_abs_err": 3.5}]},
            duration_s=2.0))
        run.rungs += [RungResult(name, Status.SKIPPED, reason="needs correctness, which failed")
                      for name in ("benchmark", "roofline")]
    else:
        run.rungs.append(RungResult(
            "correctness", Status.OK, duration_s=2.0,
            figures={"cases": 8, "passed": 8, "seeds": 3, "max_abs_err": 0.0078, "max_rel_err": 0.0061,
                     "psnr_db": 52.3, "cossim": 0.99998,
                     "worst_case": "M=509,N=383,K=257,dtype=bfloat16",
                     "per_case": [{"case": "M=509,N=383,K=257,dtype=bfloat16",
                                   "passed": True, "max_abs_err": 0.0078}]}))
        bench_rows = [{"case": label, "median_us": t, "ref_median_us": ref,
                       "speedup": ref / t, "timer": "cupti", "kernels_per_call": 1.0,
                       "launch_bound": False, "host_median_us": t + 4}
                      for (label, _, _), t, ref in zip(MATMUL_CASES, times_us, REFERENCE_US,
                                                       strict=True)]
        geomean = _geomean([r["median_us"] for r in bench_rows])
        run.rungs.append(RungResult("benchmark", Status.OK, duration_s=3.0, figures={
            "timer": "cupti", "cases": 3, "geomean_us": geomean,
            "speedup": _geomean([r["speedup"] for r in bench_rows]), "per_case": bench_rows}))
        ceilings = Ceilings.from_record(H200_RECORD)
        rows = [case_figures(row, "bf16", flops, moved, ceilings, threshold, None)
                for row, (_, flops, moved) in zip(bench_rows, MATMUL_CASES, strict=True)]
        figures = summarise(rows, threshold, "measured 2026-12-01T10:00:00+00:00 (kept in "
                            "the store)", ceilings_table(H200_RECORD, device))
        assert figures is not None
        if figures["verdict"] == "suspect":
            run.rungs.append(RungResult("roofline", Status.FAILED, figures=figures,
                                        error="SuspectTime: faster than the roofline allows",
                                        error_type="SuspectTime", hint="check the work"))
        else:
            run.rungs.append(RungResult("roofline", Status.OK, figures=figures,
                                        duration_s=0.01))
    for position, rung in enumerate(run.rungs):
        store.add_rung(run.run_id, position, rung)
    run.env = {"device": "cuda", "device_name": device, "torch": "2.13.0"}
    store.finish(run)
    return run


def _geomean(values: list[float]) -> float:
    product = 1.0
    for value in values:
        product *= value
    return product ** (1 / len(values))


def matmul_history(store: Store) -> dict[str, Run]:
    """Six versions of a matmul, as an agent might leave them: a first try, a wrong one, a
    faster branch and a slower one from it, a tuned one near the roofline, and one whose time
    is impossible. Named by what they are."""
    runs: dict[str, Run] = {}
    runs["v1"] = record_run(store, "/ws/versions/v1.py", [900.0, 6800.0, 1500.0],
                            started_at="2026-12-01T10:00:00+00:00")
    runs["v2_wrong"] = record_run(store, "/ws/versions/v2.py", None,
                                  started_at="2026-12-01T10:05:00+00:00",
                                  parent=runs["v1"].run_id)
    runs["v3"] = record_run(store, "/ws/versions/v3.py", [420.0, 3100.0, 720.0],
                            started_at="2026-12-01T10:10:00+00:00", parent=runs["v1"].run_id)
    runs["v4_slower"] = record_run(store, "/ws/versions/v4.py", [460.0, 3300.0, 800.0],
                                   started_at="2026-12-01T10:15:00+00:00",
                                   parent=runs["v3"].run_id)
    runs["v5"] = record_run(store, "/ws/versions/v5.py", [190.0, 1460.0, 330.0],
                            started_at="2026-12-01T10:20:00+00:00", parent=runs["v3"].run_id)
    runs["v6_suspect"] = record_run(store, "/ws/versions/v6.py", [100.0, 1300.0, 300.0],
                                    started_at="2026-12-01T10:25:00+00:00",
                                    parent=runs["v5"].run_id)
    return runs
