"""Paths a bench case takes that no check ran: every verdict names them (krung.protocol.
unchecked), and a version whose paths were all checked keeps a plain OK."""

from __future__ import annotations

import random

from tests.conftest import write
from tests.test_schema import errors, validator  # noqa: F401 (a fixture)

# Row sums; the bench case's rows are wider than any test case's: a version's loop path
# runs only there.
PROBLEM = '''
    import torch

    description = "the sum of each row"

    def reference(x):
        return x.sum(dim=-1)

    def make_inputs(case, seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(case["rows"], case["cols"], generator=g, device=device),)

    test_cases = [{{"rows": r, "cols": c, "dtype": "float32"}} for r, c in ((1, 1), (3, 7), (5, 100))]
    bench_cases = [{{"rows": 4096, "cols": {cols}, "dtype": "float32"}}]
    cpu_bench_cases = [{{"rows": 4, "cols": 100, "dtype": "float32"}}]

    def flops(case):
        return case["rows"] * case["cols"]

    def bytes_moved(case):
        return 4 * case["rows"] * (case["cols"] + 1)
'''

# One block for rows up to 1024 wide, a loop over blocks of 1024 past that.
TWO_PATHS = '''
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _one_block(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        c = tl.arange(0, BLOCK)
        tl.store(y_ptr + row, tl.sum(tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0), axis=0))


    @triton.jit
    def _looped(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        total = 0.0
        for start in range(0, cols, BLOCK):
            c = start + tl.arange(0, BLOCK)
            total += tl.sum(tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0), axis=0)
        tl.store(y_ptr + row, total)


    def kernel(x):
        rows, cols = x.shape
        y = torch.empty(rows, dtype=x.dtype, device=x.device)
        if cols <= 1024:
            _one_block[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        else:
            _looped[(rows,)](x, y, cols, BLOCK=1024)
        return y
'''
RUNGS = "static,compile,run,correctness,artifacts"
BUDGET = {"KRUNG_CPU_CHECK_BUDGET": "1"}


def _run(krung, tmp_path, cols: int):
    problem = write(tmp_path / f"rowsum{cols}" / "problem.py", PROBLEM.format(cols=cols)).parent
    version = write(tmp_path / "two_paths.py", TWO_PATHS)
    result = krung("run", problem, version, "--rungs", RUNGS, "--json", env=BUDGET)
    assert result.code == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.json()


def test_a_bench_path_no_affordable_case_reaches_is_named_in_every_verdict(krung, tmp_path,
                                                                          validator):  # noqa: F811
    # Wide enough that even 16 rows of it cost seconds under the interpreter
    cols = random.choice([1 << 20, 3 << 19, (1 << 20) + 16 * random.randint(1, 999)])
    run = _run(krung, tmp_path, cols)
    case = f"rows=4096,cols={cols},dtype=float32"
    assert run["outcome"] == "passed" and errors(validator, run) == []
    paths = run["unchecked_paths"]
    assert {(p["rung"], p["case"]) for p in paths} == {("correctness", case),
                                                       ("artifacts", case)}, paths
    looped = next(p for p in paths if p["rung"] == "artifacts")
    assert looped["path"].startswith("Triton kernel _looped [BLOCK=1024")
    assert next(p for p in paths if p["rung"] == "correctness")["cost_s"] > 1

    text = krung("show", run["run_id"]).stdout.rstrip().splitlines()[-1]
    assert text.startswith(f"OK with unchecked paths  run {run['run_id']}: every rung passed; "
                           f"never checked: bench case {case}: its shape (not checked: ")
    assert "Triton kernel _looped [BLOCK=1024" in text
    agent = krung("show", run["run_id"], "--format", "agent").stdout
    summary = agent.split("\n\n", 1)[1].splitlines()
    assert summary[0].startswith("OK with unchecked paths (every rung passed)  run ")
    assert summary[2].startswith(f"unchecked paths: bench case {case}: its shape")
    assert "_looped" in summary[2]
    # the next step: a budget that reaches the path (a bench shape gets an eighth of it)
    assert summary[-1].startswith("next: KRUNG_CPU_CHECK_BUDGET=")
    assert int(summary[-1].split("=", 1)[1].split()[0]) >= 8
    assert f"take a path never checked here (first {case}" in summary[-1]


def test_the_same_version_with_its_bench_path_checked_gets_a_plain_ok(krung, tmp_path):
    cols = random.choice([2048, 1040 + 16 * random.randint(0, 60), 1025 + 2 * random.randint(0, 400)])
    run = _run(krung, tmp_path, cols)
    assert run["outcome"] == "passed" and run["unchecked_paths"] == []
    correctness = next(r for r in run["rungs"] if r["name"] == "correctness")
    assert "bench_paths_unchecked" not in correctness["figures"]
    assert any("(bench rows=4096" in row["case"] for row in correctness["figures"]["per_case"])
    text = krung("show", run["run_id"]).stdout.rstrip().splitlines()[-1]
    assert text == f"OK  run {run['run_id']}: every rung passed"
