"""The `krung` command end to end, in a subprocess, on small torch-only problems."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import krung
from tests.conftest import GOOD, TAIL_BUG, default_sigint, until_rung, write


@pytest.mark.newest
def test_good_version_passes_every_rung(shared_runs):
    result = shared_runs.run("good", GOOD)
    assert result.code == 0, result.stderr
    run = result.json()
    assert run["ok"] is True
    assert [r["name"] for r in run["rungs"]] == ["static", "compile", "run", "correctness",
                                                 "determinism", "benchmark", "artifacts",
                                                 "roofline"]  # the profile only on request
    assert all(r["status"] == "ok" for r in run["rungs"][:-1])
    # No GPU here: the roofline is skipped, which does not fail the run.
    roofline = run["rungs"][-1]
    assert roofline["status"] == "skipped" and roofline["reason"].startswith("no GPU: ")
    correctness = run["rungs"][3]["figures"]
    for key in ("max_abs_err", "max_rel_err", "mse", "rmse", "psnr_db", "cossim"):
        assert key in correctness
    # the declared and unseen cases, on a CPU the bench case's shape, once, and the value
    # stresses that apply to the problem (4 of them on the scale problem's draws)
    rows = correctness["per_case"]
    bench_shapes = sum("(bench " in row["case"] for row in rows)
    stresses = sum("stress" in row for row in rows)
    declared = 3 + correctness["unseen_cases"] + bench_shapes + stresses
    assert correctness["cases"] == declared == len(rows)
    assert bench_shapes == 1 and stresses == len(correctness["value_stress"]) >= 4
    assert correctness["unseen_cases"] >= 1 and correctness["seeds"] == 3
    bench = run["rungs"][5]["figures"]
    assert bench["timer"] == "cpu-wall"
    case = bench["per_case"][0]
    assert case["median_us"] > 0 and case["speedup"] > 0 and case["ref_median_us"] > 0


@pytest.mark.newest
def test_text_output_has_one_line_per_rung(krung, scale_problem, version):
    result = krung("run", scale_problem, version("good", GOOD), "--rungs", "static,compile,run")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("device: cpu")
    assert "interpreter" in lines[0]
    assert re.match(r"\[static\] ok  dsl=torch", lines[1])
    assert lines[2].startswith("[compile] ok  import_s=")
    assert lines[3].startswith("[run] ok  ")
    assert "every rung passed" in lines[-1]


def test_wrong_version_fails_correctness_with_exit_1(krung, scale_problem, version):
    # The cases as declared, in their order (the CPU budget would run the smallest first).
    result = krung("run", scale_problem, version("tail", TAIL_BUG), "--json",
                   env={"KRUNG_CPU_CHECK_BUDGET": "0"})
    assert result.code == 1
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert rungs["run"]["status"] == "ok"  # the first case (n=1) is right
    failed = rungs["correctness"]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("Mismatch: ")
    # The declared case with the bug, and perhaps unseen neighbours of n=1000 or n=4099, and
    # the value stresses on n=4099 (the same sizes, the same bug).
    assert failed["figures"]["failed_cases"][0] == "n=4099,dtype=bfloat16"
    assert all(c == "n=4099,dtype=bfloat16" or c.endswith("(unseen)")
               or c.startswith("n=4099,dtype=bfloat16 (stress: ")
               for c in failed["figures"]["failed_cases"])
    assert "right on the generator's values" not in failed["hint"]  # a size bug, not values
    assert failed["figures"]["first_mismatch"] == [4098]
    assert failed["hint"]
    assert rungs["benchmark"]["status"] == "skipped"
    assert rungs["benchmark"]["reason"] == "needs correctness, which failed"


@pytest.mark.parametrize("name, source, error_type, words, lines", [
    ("segfault", "import ctypes\ndef kernel(x):\n    return ctypes.string_at(0)\n",
     "WorkerCrashed", "SIGSEGV", {3}),
    ("os_exit", "import os\ndef kernel(x):\n    os._exit(0)\n", "WorkerCrashed", "status 0",
     None),
    ("abort", "import os\ndef kernel(x):\n    os.abort()\n", "WorkerCrashed", "SIGABRT", {3}),
    ("hang", "def kernel(x):\n    while True:\n        pass\n", "Timeout", "did not finish",
     {2, 3}),
])
def test_crashing_versions_fail_cleanly_and_the_next_run_works(
        krung, scale_problem, version, name, source, error_type, words, lines):
    # The endless loop meets a 1 s limit; the crashes have 4 s, for a loaded machine.
    env = {"KRUNG_COMPILE_TIMEOUT": "1" if error_type == "Timeout" else "4",
           "KRUNG_CALL_TIMEOUT": "4"}
    result = krung("run", scale_problem, version(name, source), "--json", env=env, timeout=120)
    assert result.code == 1, result.stderr
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    failed = rungs["compile"]  # the first call is where it crashes
    assert failed["status"] == "failed"
    assert failed["error_type"] == error_type
    assert words in failed["error"]
    if error_type == "Timeout":  # the first call's limit is --compile-timeout's, not --timeout's
        assert "raise the limit with --compile-timeout" in failed["hint"], failed["hint"]
    if lines:  # the Python stack that faulthandler wrote names the version's line
        file, line = failed["location"].rsplit(":", 1)
        assert file.endswith(f"{name}.py") and int(line) in lines
    assert rungs["run"]["status"] == "skipped"
    after = krung("run", scale_problem, version("good", GOOD), "--rungs", "compile,run")
    assert after.code == 0, after.stdout + after.stderr


def test_sys_exit_and_exceptions_are_reported_with_the_line(krung, scale_problem, version):
    source = "import sys\n\ndef kernel(x):\n    sys.exit(3)\n"
    result = krung("run", scale_problem, version("exits", source), "--json")
    assert result.code == 1
    run_rung = {r["name"]: r for r in result.json()["rungs"]}["run"]
    assert run_rung["error_type"] == "SystemExit"
    assert run_rung["location"].endswith("exits.py:4")
    assert "sys.exit(3)" in run_rung["details"]

    source = "def kernel(x):\n    return x.view(3, -1) * 2\n"
    result = krung("run", scale_problem, version("raises", source), "--json")
    run_rung = {r["name"]: r for r in result.json()["rungs"]}["run"]
    assert run_rung["error_type"] == "RuntimeError"
    assert run_rung["location"].endswith("raises.py:2")


def test_output_contract_is_checked(krung, scale_problem, version):
    source = "def kernel(x):\n    return (x * 2 + 1).double()\n"
    result = krung("run", scale_problem, version("f64", source), "--json")
    rung = {r["name"]: r for r in result.json()["rungs"]}["run"]
    assert rung["error_type"] == "OutputContract"
    assert "dtype float64" in rung["error"]

    source = "def kernel(x):\n    return [x * 2 + 1, x]\n"
    result = krung("run", scale_problem, version("two", source), "--json")
    rung = {r["name"]: r for r in result.json()["rungs"]}["run"]
    assert rung["error_type"] == "OutputContract"


def test_static_rung_catches_syntax_missing_entry_point_and_reference_imports(
        krung, scale_problem, version):
    result = krung("run", scale_problem, version("syntax", "def kernel(x)\n    return x\n"),
                   "--json")
    static = result.json()["rungs"][0]
    assert static["error_type"] == "SyntaxError"
    assert static["location"].endswith("syntax.py:1")
    assert result.json()["rungs"][1]["status"] == "skipped"

    result = krung("run", scale_problem, version("noentry", "def kern(x):\n    return x\n"),
                   "--json")
    assert result.json()["rungs"][0]["error_type"] == "EntryPointMissing"

    cheat = "from problem import reference\n\ndef kernel(x):\n    return reference(x)\n"
    result = krung("run", scale_problem, version("cheat", cheat), "--json")
    static = result.json()["rungs"][0]
    assert static["error_type"] == "ImportsReference"
    assert static["location"].endswith("cheat.py:1")


def test_rungs_option_selects_a_subset(krung, scale_problem, version):
    result = krung("run", scale_problem, version("good", GOOD), "--rungs", "correctness",
                   "--json")
    assert result.code == 0, result.stderr
    assert [r["name"] for r in result.json()["rungs"]] == ["correctness"]
    bad = krung("run", scale_problem, version("good", GOOD), "--rungs", "correctnes")
    assert bad.code == 2
    assert "unknown rung(s): correctnes" in bad.stderr
    assert "hint: choose from:" in bad.stderr


def test_broken_problems_exit_2_naming_each_defect(krung, tmp_path, version):
    good = version("good", GOOD)
    write(tmp_path / "nodtype" / "problem.py", """
        import torch
        def reference(x):
            return x
        def make_inputs(case, seed):
            return (torch.ones(3),)
        test_cases = [{"n": 3}]
        bench_cases = [{"n": 3, "dtype": "float32"}]
        def flops(case):
            return 0
    """)
    result = krung("run", tmp_path / "nodtype", good)
    assert result.code == 2
    assert "ProblemError" in result.stderr
    assert "`make_inputs(case, seed)` cannot be called as" in result.stderr
    assert "test_cases[0] = {'n': 3} has no dtype" in result.stderr
    assert "`bytes_moved` is missing" in result.stderr

    write(tmp_path / "zeros" / "problem.py", """
        import torch
        def reference(x):
            return x
        def make_inputs(case, seed, device):
            return (torch.zeros(case["n"], device=device),)
        test_cases = [{"n": 3, "dtype": "float32"}]
        bench_cases = [{"n": 3, "dtype": "float32"}]
        def flops(case):
            return 0
        def bytes_moved(case):
            return 0
    """)
    result = krung("run", tmp_path / "zeros", good)
    assert result.code == 2
    assert "all-zero tensor" in result.stderr
    assert "ignores its seed" in result.stderr

    # zeros in the smallest case alone are the data's own (a mask that starts at 16)
    write(tmp_path / "masked" / "problem.py", """
        import torch
        def reference(x, mask):
            return x * mask
        def make_inputs(case, seed, device):
            g = torch.Generator(device=device).manual_seed(seed)
            x = torch.randn(case["n"], generator=g, device=device)
            return x, (torch.arange(case["n"], device=device) >= 16).float()
        test_cases = [{"n": 3, "dtype": "float32"}, {"n": 1000, "dtype": "float32"}]
        bench_cases = [{"n": 4099, "dtype": "float32"}]
        def flops(case):
            return case["n"]
        def bytes_moved(case):
            return 12 * case["n"]
    """)
    masked = version("masked", "def kernel(x, mask):\n    return x * mask\n")
    result = krung("run", tmp_path / "masked", masked, "--rungs", "static,compile,run")
    assert result.code == 0, result.stdout + result.stderr

    write(tmp_path / "random" / "problem.py", """
        import torch
        def reference(x):
            return x
        def make_inputs(case, seed, device):
            return (torch.randn(case["n"], device=device),)
        test_cases = [{"n": 3, "dtype": "float32"}]
        bench_cases = [{"n": 3, "dtype": "float32"}]
        def flops(case):
            return 0
        def bytes_moved(case):
            return 0
    """)
    result = krung("run", tmp_path / "random", good)
    assert result.code == 2
    assert "not deterministic" in result.stderr
    assert "torch.Generator(device=device).manual_seed(seed)" in result.stderr


@pytest.mark.newest
def test_usage_errors_exit_2_with_a_hint(krung, scale_problem, tmp_path):
    result = krung("run", "no_such_problem", tmp_path / "missing.py")
    assert result.code == 2
    assert "UsageError" in result.stderr and "hint:" in result.stderr
    result = krung("run", scale_problem, tmp_path / "missing.py")
    assert result.code == 2
    assert "no version file" in result.stderr
    result = krung("run", scale_problem, tmp_path / "missing.py", "--device", "tpu")
    assert result.code == 2


def test_store_keeps_every_run_and_history_show_best_read_it(krung, scale_problem, version):
    good = version("good", GOOD)
    wrong = version("tail", TAIL_BUG)
    ids = []
    for path in (good, wrong, good):
        ids.append(krung("run", scale_problem, path, "--json").json()["run_id"])
    listed = krung("history", "scale", "--json").json()
    assert [r["run_id"] for r in listed] == list(reversed(ids))
    assert [r["verdict"] for r in listed] == ["ok", "failed", "ok"]
    assert listed[1]["failed_rung"] == "correctness"
    assert listed[0]["geomean_us"] > 0

    text = krung("history", "scale")
    assert text.code == 0 and ids[1] in text.stdout and "failed (correctness)" in text.stdout

    shown = krung("show", ids[1][:5], "--json", "--source")
    assert shown.code == 0
    run = shown.json()
    assert run["run_id"] == ids[1] and run["ok"] is False
    assert run["source"].strip() == TAIL_BUG.strip()
    assert run["env"]["torch"] and run["env"]["device"] == "cpu"
    assert run["seed"] > 0

    best = krung("best", "scale", "--json").json()
    assert best["run_id"] in (ids[0], ids[2])
    assert "lowest geomean" in best["rule"]
    assert krung("show", "zzzz").code == 2


def test_seed_reproduces_the_inputs(krung, scale_problem, version):
    good = version("good", GOOD)
    # Without the CPU budget, whose shrinking follows the times it measures, the cases are
    # the same too; every figure but the wall time is then the same.
    runs = [krung("run", scale_problem, good, "--seed", "42", "--rungs", "correctness",
                  "--json", env={"KRUNG_CPU_CHECK_BUDGET": "0"}).json() for _ in range(2)]
    assert runs[0]["seed"] == runs[1]["seed"] == 42
    figures = [[{k: v for k, v in row.items() if k != "seconds"}
                for row in run["rungs"][0]["figures"]["per_case"]] for run in runs]
    assert figures[0] == figures[1]


def test_new_scaffolds_a_problem_whose_first_version_passes(krung, tmp_path):
    made = krung("new", "fused_silu", "--dir", tmp_path)
    assert made.code == 0, made.stderr
    problem = tmp_path / "fused_silu"
    result = krung("run", problem, problem / "solutions" / "triton_v1.py", "--rungs",
                   "static,compile,run,correctness", "--json")
    assert result.code == 0, result.stdout + result.stderr
    assert result.json()["rungs"][0]["figures"]["dsl"] == "triton"
    assert krung("new", "fused_silu", "--dir", tmp_path).code == 2


def test_problems_lists_the_builtin_problems(krung):
    result = krung("problems", "--json")
    names = [p["name"] for p in result.json()]
    assert {"vector_add", "softmax", "rmsnorm", "matmul"} <= set(names)
    assert all(p["description"] for p in result.json())


def test_a_problem_with_only_power_of_two_sizes_is_refused(krung, tmp_path, version):
    write(tmp_path / "pow2" / "problem.py", """
        import torch
        def reference(x):
            return x
        def make_inputs(case, seed, device):
            g = torch.Generator(device=device).manual_seed(seed)
            return (torch.randn(case["n"], generator=g, device=device),)
        test_cases = [{"n": 64, "dtype": "float32"}, {"n": 1024, "dtype": "float32"}]
        bench_cases = [{"n": 4096, "dtype": "float32"}]
        def flops(case):
            return 0
        def bytes_moved(case):
            return 0
    """)
    result = krung("run", tmp_path / "pow2", version("good", GOOD))
    assert result.code == 2
    assert "power of two" in result.stderr and "awkward" in result.stderr


def test_a_version_right_only_outside_the_timed_loop_fails_the_benchmark(
        krung, scale_problem, version):
    # Once it has seen a shape 8 times (only the benchmark repeats a shape that often), it
    # replays the output it cached for it: fast, and wrong on new inputs.
    source = """
        seen = {}
        cache = {}
        def kernel(x):
            seen[x.shape] = seen.get(x.shape, 0) + 1
            if seen[x.shape] > 8:
                return cache[x.shape].clone()
            cache[x.shape] = x * 2 + 1
            return cache[x.shape]
    """
    import textwrap

    result = krung("run", scale_problem, version("replay", textwrap.dedent(source)), "--json")
    assert result.code == 1
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert rungs["correctness"]["status"] == "ok"
    assert rungs["benchmark"]["error_type"] == "TimedMismatch"
    assert "timed calls" in rungs["benchmark"]["error"]


def test_a_problem_that_does_not_parse_names_its_line(krung, tmp_path, version):
    write(tmp_path / "typo" / "problem.py", "import torch\n\ndef reference(x)\n    return x\n")
    result = krung("run", tmp_path / "typo", version("good", GOOD))
    assert result.code == 2
    assert "SyntaxError" in result.stderr
    assert f"{tmp_path / 'typo' / 'problem.py'}:3" in result.stderr


def test_rungs_help_names_the_default_ladder_and_the_rungs_only_on_request(krung):
    result = krung("run", "--help", env={"COLUMNS": "400", "TERM": "dumb"})
    assert result.code == 0, result.stderr
    text = " ".join(result.stdout.split())
    import krung as api

    assert f"default: {','.join(api.DEFAULT_LADDER)}; also: profile,trace" in \
        text.replace("│ ", "")


@pytest.mark.newest
@pytest.mark.parametrize("args, message", [
    (["bogus"], "No such command 'bogus'"),
    (["run"], "Missing argument"),
    (["run", "--bogus"], "No such option: --bogus"),
    (["run", "softmax", "v.py", "--rungs"], "requires an argument"),
    (["history", "softmax", "--limit", "many"], "Invalid value for '--limit'"),
])
def test_command_line_errors_are_one_message_and_exit_2(krung, args, message):
    """Whichever click parses (typer 0.29 vendors its own), never a traceback: the usage
    line, `UsageError: message` and where help is."""
    result = krung(*args)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 3, result.stderr
    assert lines[-2].startswith("UsageError: ") and message in lines[-2]
    assert lines[-1].startswith("hint: `krung") and "--help`" in lines[-1]
    assert result.stdout == ""


@pytest.mark.newest
def test_version_and_help(krung):
    import krung as api

    result = krung("--version")
    assert (result.code, result.stdout) == (0, f"krung {api.__version__}\n")
    assert krung("run", "--help").code == 0


@pytest.mark.newest
def test_json_is_one_object_whatever_fails(krung, scale_problem, version, tmp_path):
    """--json prints exactly one JSON object on stdout, errors included: a parser error, a
    problem that does not load, a conflict found after parsing, a run id that does not
    exist, and a failure of krung itself (a store that is not a database)."""
    good = version("good", GOOD)
    write(tmp_path / "broken" / "problem.py", "def reference(x):\n    return x\n")
    not_a_database = tmp_path / "random.db"
    not_a_database.write_bytes(bytes(range(256)) * 64)
    cases = [
        (["run", "--json"], 2, "UsageError"),
        (["run", "--format", "json", "--bogus"], 2, "UsageError"),
        (["run", tmp_path / "broken", good, "--json"], 2, "ProblemError"),
        (["run", scale_problem, good, "--json", "--format", "agent"], 2, "UsageError"),
        (["show", "zzzz", "--format=json"], 2, "UsageError"),
        (["best", "scale", "--json"], 1, "NoPassingRun"),
        (["history", "scale", "--json", "--store", not_a_database], 3, "InternalError"),
    ]
    for args, code, error_type in cases:
        result = krung(*args)
        assert result.code == code, (args, result.stdout, result.stderr)
        found = result.json()  # the whole of stdout is one JSON document
        assert isinstance(found, dict), args
        assert found["ok"] is False and found["exit_code"] == code
        assert found["error_type"] == error_type, (args, found)
        assert found["error"].startswith(f"{error_type}: ") and found["hint"]


# Right on every call until the benchmark's repetitions, then it never returns.
HANGS_IN_BENCHMARK = """
import time
calls = 0
def kernel(x):
    global calls
    calls += 1
    if calls > 40:
        time.sleep(3600)
    return x * 2 + 1
"""


@pytest.mark.newest
@pytest.mark.parametrize("output, stop", [("text", signal.SIGINT), ("agent", signal.SIGTERM),
                                          ("json", signal.SIGTERM)])
def test_a_run_stopped_mid_way_has_printed_every_rung_it_finished(
        scale_problem, version, store, tmp_path, output, stop):
    """Each rung's line is on stdout as the rung finishes (through a pipe, as an agent reads
    it), so Ctrl-C or a timeout's SIGTERM during the benchmark loses none of them; then the
    run as recorded, saying where it was stopped, and exit 130 (JSON: the run's one object,
    whose rungs are those it finished). With typer 0.29, whose click turns Ctrl-C into a
    silent exit 130, this is printed all the same."""
    environ = dict(os.environ, KRUNG_STORE=str(store), KRUNG_DEVICE="cpu",
                   KRUNG_CALL_TIMEOUT="600")
    command = [sys.executable, "-m", "krung", "run", str(scale_problem),
               str(version("hangs", HANGS_IN_BENCHMARK)), "--format", output]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=environ, cwd=tmp_path, start_new_session=True,
                               preexec_fn=default_sigint)
    def kill_group() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the judge and worker it started too

    watchdog = threading.Timer(300, kill_group)  # lines that never come end the test too
    watchdog.start()
    try:
        seen = []
        if output == "json":  # nothing until the end: the store tells the rungs finished
            until_rung(store, "determinism")
        for line in process.stdout if output != "json" else ():  # while the run goes on
            seen.append(line.rstrip("\n"))
            if line.startswith("[determinism]"):
                break
        time.sleep(1.0)  # into the benchmark's hanging call
        assert process.poll() is None, seen  # still running: the benchmark hangs
        process.send_signal(stop)
        rest = process.stdout.read()  # what it printed after the signal, until it ended
        process.wait(timeout=60)
    finally:
        watchdog.cancel()
        kill_group()
        process.stdout.close()
    finished = ["static", "compile", "run", "correctness", "determinism"]
    assert process.returncode == 130, rest
    if output == "json":
        run = json.loads(rest)
        assert [rung["name"] for rung in run["rungs"]] == finished, run
        assert run["outcome"] == "error" and run["ok"] is False
        assert run["error"].startswith("interrupted (Ctrl-C or SIGTERM)"), run["error"]
        assert "benchmark" in run["error"], run["error"]
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.validate(run, krung.run_schema())  # what `krung schema` says a run is
        listed = subprocess.run([sys.executable, "-m", "krung", "history", "scale", "--json"],
                                capture_output=True, text=True, env=environ, timeout=60)
        verdicts = {line["run_id"]: line["verdict"] for line in json.loads(listed.stdout)}
        assert verdicts[run["run_id"]] == "stopped"  # no verdict on the version, no error
        return
    printed = [line.split()[0] for line in seen if line.startswith("[")]
    assert printed == [f"[{name}]" for name in finished]
    assert all(line.split()[1] == "ok" for line in seen if line.startswith("["))
    assert not any(line.startswith("[benchmark] ok") for line in rest.splitlines())
    assert "STOPPED (no verdict)" in rest and "benchmark" in rest, rest


def test_a_problem_whose_generator_raises_is_named_with_its_file_and_line(krung, tmp_path,
                                                                          version):
    write(tmp_path / "typo" / "problem.py", """
        import torch
        def reference(x):
            return x * 2
        def make_inputs(case, seed, device):
            g = torch.Generator(device=device).manual_seed(seed)
            return (torch.randn(case["n"], generator=g, device=device) * scale,)
        test_cases = [{"n": 17, "dtype": "float32"}, {"n": 1000, "dtype": "float32"}]
        bench_cases = [{"n": 4099, "dtype": "float32"}]
        def flops(case):
            return case["n"]
        def bytes_moved(case):
            return 8 * case["n"]
    """)
    result = krung("run", tmp_path / "typo", version("good", GOOD), "--rungs", "static")
    assert result.code == 2, result.stdout + result.stderr
    problem_file = tmp_path / "typo" / "problem.py"
    assert f"raised NameError: name 'scale' is not defined at {problem_file.resolve()}:6" in \
        result.stderr, result.stderr
