"""The rungs' declarations (krung.judge.rungs.spec): every figure a real run reports is
declared, the declarations load without torch, docs/rungs.md is made from them, and a rung of
one's own is one file that shows up in the schema, the JSON, the text, agent and HTML output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from krung.host.store import Store
from krung.judge.ladder import specs
from krung.judge.rungs.spec import TABLE, Figure, RungSpec
from tests.conftest import GOOD, REPO, TAIL_BUG
from tests.recorded import matmul_history

# y = 2x + 1 as a Triton kernel: the artifacts rung then has kernels to report.
TRITON_GOOD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(y_ptr + offsets, x * 2 + 1, mask=mask)


def kernel(x):
    y = torch.empty_like(x)
    affine[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
'''

# A rung of one's own, in one file: its figures, a table per case, and a line for agents.
TOY_RUNG = '''
    """toy: a rung of one's own, in one file."""
    from krung.judge.problem import case_label
    from krung.judge.rungs.spec import AGENT, HTML, TABLE, Figure, RungSpec

    SPEC = RungSpec(
        "toy", order=45, needs=("run",), on_request=True,
        checks="the version's source is counted, and each test case gets a made-up time",
        figures=(
            Figure("toy_lines", "", "lines of the version", "count", shown=(AGENT, HTML)),
            Figure("case", "", "the test case", "text", per_case=True, required=True),
            Figure("toy_time", "us", "a made-up time", per_case=True,
                   shown=(TABLE, HTML, AGENT)),
        ))


    def run(ctx):
        return {"toy_lines": len(ctx.solution.source.splitlines()),
                "per_case": [{"case": case_label(case), "toy_time": 1.5 * index + 0.25}
                             for index, case in enumerate(ctx.problem.test_cases)]}
'''


def test_the_declarations_load_without_torch():
    """The host reads every rung's declaration, and makes the schema and the reports' tables
    from them, without importing torch (nor any DSL)."""
    code = textwrap.dedent("""
        import sys
        from krung.host import html_report, report, schema
        from krung.judge.ladder import RUNGS, specs
        assert len(specs()) == len(RUNGS) >= 10, RUNGS
        schema.run_schema()
        heavy = sorted(m for m in ("torch", "triton", "numpy") if m in sys.modules)
        assert not heavy, heavy
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_without_extra_rungs())
    assert done.returncode == 0, done.stderr


def test_every_figure_real_runs_report_is_declared(shared_runs):
    runs = [shared_runs.run("good", GOOD), shared_runs.run("affine", TRITON_GOOD),
            shared_runs.run("tail", TAIL_BUG)]
    assert [r.code for r in runs] == [0, 0, 1], [r.stderr for r in runs]
    declared = specs()
    seen: set[tuple[str, str]] = set()
    for run in (r.json() for r in runs):
        for rung in run["rungs"]:
            spec = declared[rung["name"]]
            assert spec.undeclared(rung["figures"], rung["status"] == "failed") == [], \
                rung["name"]
            seen.update((rung["name"], k) for k in rung["figures"])
    # The runs did report what is checked: the kernels' table, a failure's own figures.
    assert {("artifacts", "per_kernel"), ("correctness", "failed_cases"),
            ("benchmark", "per_case"), ("static", "dsl")} <= seen


@pytest.mark.slow  # nvcc over torch's headers
def test_every_figure_of_cuda_compiled_without_a_gpu_is_declared(krung):
    """CUDA C++ on a CPU: the compile rung's nvcc path and its table per kernel."""
    ran = krung("run", "vector_add", REPO / "problems" / "vector_add" / "solutions" /
                "cuda_inline.py", "--rungs", "static,compile,artifacts", "--json")
    assert ran.code == 0, ran.stderr
    rungs = {r["name"]: r for r in ran.json()["rungs"]}
    assert rungs["compile"]["figures"]["per_kernel"] and rungs["artifacts"]["figures"]["kernels"]
    for name, rung in rungs.items():
        assert specs()[name].undeclared(rung["figures"]) == [], name


def test_every_figure_of_recorded_gpu_runs_is_declared(tmp_path):
    store = Store(tmp_path / "k.db")
    try:
        runs = matmul_history(store)
    finally:
        store.close()
    declared = specs()
    for run in runs.values():
        for rung in run.rungs:
            assert declared[rung.name].undeclared(rung.figures, not rung.ok) == [], rung.name


@pytest.mark.gpu
@pytest.mark.ncu
def test_every_figure_a_gpu_run_reports_is_declared_and_shown(krung, scale_problem, version,
                                                              tmp_path):
    """On a GPU: the profile, the roofline and the trace report what they declare, and the
    text and the page show their tables."""
    from tests.test_gpu_profile_trace import TRACED

    softmax = REPO / "problems" / "softmax" / "solutions" / "triton_rowwise.py"
    profiled = krung("run", "softmax", softmax, "--device", "cuda", "--rungs", "+profile",
                     "--json")
    traced = krung("run", scale_problem, version("traced", TRACED), "--device", "cuda",
                   "--rungs", "static,compile,run,trace", "--json")
    assert (profiled.code, traced.code) == (0, 0), profiled.stderr + traced.stderr
    declared = specs()
    rows = {}
    for run in (profiled.json(), traced.json()):
        for rung in run["rungs"]:
            assert rung["status"] == "ok", rung
            assert declared[rung["name"]].undeclared(rung["figures"]) == [], rung["name"]
            rows[rung["name"]] = rung["figures"].get(declared[rung["name"]].rows)
    assert rows["profile"] and rows["roofline"] and rows["trace"] and rows["benchmark"]
    text = krung("show", profiled.json()["run_id"]).stdout
    assert "profile per kernel" in text and "roofline per bench case" in text
    assert "intensity (FLOP/B)" in text and "sm_mhz_timed" in text
    assert "trace per region" in krung("show", traced.json()["run_id"]).stdout
    made = krung("report", "softmax", "-o", "gpu.html")
    assert made.code == 0, made.stderr
    page = (tmp_path / "gpu.html").read_text()
    assert "<b>profile per kernel</b>" in page and "<b>roofline per bench case</b>" in page
    assert '<ul class="limiters">' in page and "<th>kernels_per_call</th>" in page


def test_an_undeclared_figure_is_found():
    spec = specs()["benchmark"]
    row = {"case": "n=1", "median_us": 3.0, "made_up_us": 1.0}
    assert spec.undeclared({"geomean_us": 3.0, "odd": 1, "per_case": [row]}) == \
        ["odd", "per_case[].made_up_us"]
    # a failed benchmark's figures may be the failing case's row (ImpossibleTime)
    assert spec.undeclared({"case": "n=1", "median_us": 3.0}, failed=True) == []
    assert spec.undeclared({"case": "n=1", "median_us": 3.0}) == ["case", "median_us"]


def test_figures_say_their_unit_in_a_header_where_the_name_does_not():
    assert Figure("median_us", "us", "m").header == "median_us"
    assert Figure("ci_pct", "%", "m").header == "ci_pct"
    assert Figure("tflops", "TFLOP/s", "m").header == "tflops"
    assert Figure("speedup", "x", "m").header == "speedup (x)"
    assert Figure("intensity", "FLOP/B", "m").header == "intensity (FLOP/B)"
    assert Figure("registers", "", "m", "count").header == "registers"


def test_a_declaration_is_checked_when_it_is_made():
    with pytest.raises(ValueError, match="kind 'float'"):
        Figure("x", "", "m", "float")
    with pytest.raises(ValueError, match="shown in \\['terminal'\\]"):
        Figure("x", "", "m", shown=("terminal",))
    with pytest.raises(ValueError, match="declares x twice"):
        RungSpec("r", 1, "checks", figures=(Figure("x", "", "m"), Figure("x", "", "n")))
    # a name may be a figure of the rung and a column of its table both
    both = RungSpec("r", 1, "c", figures=(Figure("x", "", "m"),
                                          Figure("x", "", "n", per_case=True, shown=(TABLE,))))
    assert [f.name for f in both.shown(TABLE, per_case=True)] == ["x"]


def test_the_ladder_comes_from_the_declarations():
    declared = specs()
    orders = [s.order for s in declared.values()]
    assert orders == sorted(orders)
    assert list(declared)[:4] == ["static", "compile", "run", "correctness"]
    assert {n for n, s in declared.items() if s.on_request} == {"profile", "trace"}
    for name, spec in declared.items():
        assert set(spec.needs) <= set(declared) - {name}
        labels = {f.name for f in spec.columns}
        assert not spec.columns or set(spec.row_label) <= labels, name


def test_docs_rungs_md_is_made_from_the_declarations():
    done = subprocess.run([sys.executable, "-m", "krung.judge.rungs.spec", "--markdown"],
                          capture_output=True, text=True, env=_without_extra_rungs())
    assert done.returncode == 0, done.stderr
    committed = (REPO / "docs" / "rungs.md").read_text()
    assert done.stdout == committed, ("docs/rungs.md is out of date: python -m "
                                      "krung.judge.rungs.spec --markdown > docs/rungs.md")
    for spec in specs().values():
        assert f"## {spec.name}\n" in committed
        assert all(f"| `{f.name}` |" in committed for f in spec.figures)


def test_a_rung_of_ones_own_is_one_file(krung, scale_problem, version, tmp_path):
    folder = tmp_path / "my_rungs"
    folder.mkdir()
    (folder / "toy_rung.py").write_text(textwrap.dedent(TOY_RUNG).lstrip())
    env = {"KRUNG_EXTRA_RUNGS": "toy_rung",
           "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    good = version("good", GOOD)
    counted = len(good.read_text().splitlines())  # as the toy counts them
    ran = krung("run", scale_problem, good, "--rungs", "+toy", "--json", env=env)
    assert ran.code == 0, ran.stderr
    run = ran.json()
    names = [r["name"] for r in run["rungs"]]
    assert names[names.index("correctness") + 1] == "toy"  # order 45: after correctness
    toy = run["rungs"][names.index("toy")]
    assert toy["status"] == "ok"
    assert toy["figures"]["toy_lines"] == counted
    assert [row["toy_time"] for row in toy["figures"]["per_case"]] == [0.25, 1.75, 3.25]

    # the schema knows the rung and types its figures from the declaration
    jsonschema = pytest.importorskip("jsonschema", reason="a test dependency (the dev extra)")
    schema = krung("schema", env=env).json()
    rung = schema["$defs"]["rung"]
    assert "toy" in rung["properties"]["name"]["enum"]
    figures = next(c["then"]["properties"]["figures"] for c in rung["allOf"]
                   if c["if"]["properties"].get("name", {}).get("const") == "toy")
    assert figures["properties"]["toy_lines"]["type"] == ["integer", "null"]
    row = figures["properties"]["per_case"]["items"]
    assert row["properties"]["toy_time"]["description"] == "a made-up time (us)"
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(run)) == []
    broken = {**toy, "figures": {**toy["figures"], "toy_lines": "many"}}
    assert list(validator.iter_errors({**run, "rungs": [broken]}))
    without = krung("schema", env={"KRUNG_EXTRA_RUNGS": ""}).json()
    assert "toy" not in without["$defs"]["rung"]["properties"]["name"]["enum"]

    # the text: its line as it finishes, and its table with the unit in the header
    text = krung("show", run["run_id"], env=env)
    assert text.code == 0, text.stderr
    assert f"[toy] ok  toy_lines={counted}" in text.stdout
    table = text.stdout[text.stdout.index("toy per case"):]
    assert re.search(r"case\s+toy_time \(us\)", table)
    assert re.search(r"n=1000,dtype=float32\s+1\.75", table)

    # the agent format: its line, and the figures it shows agents
    agent = krung("show", run["run_id"], "--format", "agent", env=env)
    assert agent.code == 0, agent.stderr
    lines = agent.stdout.splitlines()
    assert f"[toy] ok  toy_lines={counted}" in lines
    assert f"toy: toy_lines {counted}" in lines
    assert "  n=4099,dtype=bfloat16: toy_time 3.25 us" in lines
    assert "toy ok" in next(line for line in lines if line.startswith("rungs: "))

    # the HTML report: its summary table and its table per case
    made = krung("report", "scale", "-o", "page.html", env=env)
    assert made.code == 0, made.stderr
    page = (tmp_path / "page.html").read_text()
    assert "<b>figures</b> (toy)" in page and "<th>toy_lines</th>" in page
    assert "<b>toy per case</b>" in page and "<th>toy_time (us)</th>" in page
    assert '<td class="num">3.25</td>' in page


def test_a_rung_krung_cannot_find_is_named_with_the_fix(krung, scale_problem, version):
    good = version("good", GOOD)
    unknown = krung("run", scale_problem, good, "--rungs", "+toy")
    assert unknown.code == 2
    assert "unknown rung(s): toy" in unknown.stderr
    missing = krung("run", scale_problem, good, env={"KRUNG_EXTRA_RUNGS": "no_such_rung"})
    assert missing.code == 2
    assert "KRUNG_EXTRA_RUNGS names no_such_rung, which does not import" in missing.stderr
    assert "PYTHONPATH" in missing.stderr
    bad = krung("run", scale_problem, good, env={"KRUNG_EXTRA_RUNGS": "not a module"})
    assert bad.code == 2 and "KRUNG_EXTRA_RUNGS='not a module'" in bad.stderr


def _without_extra_rungs() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KRUNG_EXTRA_RUNGS"}
