"""`agent_summary` and `--format agent`: a short plain verdict a coding agent can act on."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from krung import Run, RungResult, Status
from krung.host.report import AGENT_LINE_CHARS, AGENT_MAX_LINES, agent_summary
from tests.conftest import GOOD, TAIL_BUG, Result

DECLARED = {"KRUNG_CPU_CHECK_BUDGET": "0"}
RAISES = "def kernel(x):\n    return x.view(3, -1) * 2\n"


def summary_of(stdout: str) -> str:
    """`--format agent` prints each rung's line as it finishes, then a blank line and the
    summary: the summary, after checking the rung lines."""
    streamed, summary = stdout.split("\n\n", 1)
    assert all(re.match(r"\[\w+\] (ok|FAILED|skipped)", line) for line in streamed.splitlines())
    return summary


def run_next(line: str, tmp_path: Path, store: Path, cwd: Path | None = None) -> Result:
    """Run the command of a `next:` line as printed, in a shell where `krung` is this krung
    (a shim on PATH, as an installed krung puts one there)."""
    assert line.startswith(("next: krung ", "next: KRUNG_", "next: cd ")), line
    shim = tmp_path / "bin" / "krung"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m krung "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
               KRUNG_STORE=str(store), KRUNG_DEVICE="cpu")
    done = subprocess.run(["bash", "-c", line.removeprefix("next: ")], capture_output=True,
                          text=True, timeout=600, env=env, cwd=cwd or tmp_path)
    return Result(done.returncode, done.stdout, done.stderr)


def check_shape(text: str) -> list[str]:
    lines = text.rstrip("\n").splitlines()
    assert 3 <= len(lines) <= AGENT_MAX_LINES
    assert all(len(line) <= AGENT_LINE_CHARS for line in lines)
    assert "\x1b" not in text  # no colours
    assert lines[-1].startswith("next: ")
    return lines


def test_passing_run(krung, scale_problem, version, tmp_path, store):
    result = krung("run", scale_problem, version("good", GOOD), "--format", "agent")
    assert result.code == 0, result.stderr
    lines = check_shape(summary_of(result.stdout))
    # On a CPU the roofline cannot run: skipped, which does not fail the run (the profile is
    # not in the default ladder).
    assert lines[0].startswith("OK (every rung that could run passed; roofline skipped)  "
                               "run ")
    assert "version good.py  device cpu" in lines[0]
    assert lines[1] == ("rungs: static ok, compile ok, run ok, correctness ok, determinism ok, "
                        "benchmark ok, artifacts ok, roofline skipped (no GPU: the "
                        "roofline needs the GPU's measured ceilings, and CPU wall-clock times "
                        "under Triton's interpreter have none)")
    # 3 declared cases and 1 or 2 unseen ones, the value stresses that apply (4: no
    # integer inputs to skew, no one-element case) and on a CPU the bench case's shape, once
    assert any(re.match(r"correctness: (\d+)/\1 cases passed \(3 listed \+ [12] unseen, 3 seeds "
                        r"each; 5 value stress\(es\), 1 seed; 1 bench shape\(s\), 1 seed\); "
                        r"max_abs_err ", line)
               for line in lines), lines
    assert any(line.startswith("benchmark (cpu-wall: CPU wall-clock, not GPU time): geomean ")
               for line in lines)
    assert any(line.startswith("  n=4096,dtype=float32: ") and "speedup" in line
               for line in lines)
    # correct, timed on a CPU: compare with the history (a command that runs as printed)
    assert lines[-1].startswith(f"next: krung history {scale_problem}  # correct; its times "
                                "are interpreter times on a CPU")
    listed = run_next(lines[-1], tmp_path, store)
    assert listed.code == 0 and lines[0].split("  run ", 1)[1].split()[0] in listed.stdout


def test_failing_run_names_the_rung_the_cases_and_the_fix(krung, scale_problem, version,
                                                         tmp_path, store):
    # every case as declared, in order (no CPU budget: a budget runs the smallest first)
    result = krung("run", scale_problem, version("tail", TAIL_BUG), "--format", "agent",
                   env=DECLARED)
    assert result.code == 1
    lines = check_shape(summary_of(result.stdout))
    assert lines[0].startswith("FAILED at correctness  run ")
    assert "correctness FAILED, determinism skipped (needs correctness, which failed), " \
        "benchmark skipped (needs correctness, which failed)" in lines[1]
    assert re.match(r"error: Mismatch: \d+/\d+ test cases fail; n=4099,dtype=bfloat16", lines[2])
    # the last element alone: the hint reads it from where the mismatches lie
    assert any(line.startswith("hint: the mismatches lie in a single element, at (4098,): an "
                               "off-by-one") for line in lines), lines
    assert any(re.match(r"failing cases \(\d+ of \d+\): n=4099,dtype=bfloat16", line)
               for line in lines)
    assert "start with n=4099,dtype=bfloat16" in lines[-1]
    tail = version("tail", TAIL_BUG)
    assert lines[-1].startswith(f"next: krung run {scale_problem} {tail} --format agent  # ")

    run_id = lines[0].split("run ", 1)[1].split()[0]
    shown = krung("show", run_id, "--format", "agent")
    assert shown.code == 0
    assert shown.stdout == result.stdout  # the same verdict, from the store
    again = run_next(lines[-1], tmp_path, store)  # the same version, the same format
    assert again.code == 1
    assert summary_of(again.stdout).startswith("FAILED at correctness  run ")


def test_error_in_the_version_shows_the_line(krung, scale_problem, version):
    result = krung("run", scale_problem, version("raises", RAISES), "--format", "agent")
    assert result.code == 1
    lines = check_shape(summary_of(result.stdout))
    assert lines[0].startswith("FAILED at run")
    assert lines[2].startswith("error: RuntimeError: ")
    assert lines[3].startswith("where: ") and lines[3].endswith("raises.py:2")
    assert any("return x.view(3, -1) * 2" in line for line in lines[4:])
    assert lines[-1].startswith(f"next: krung run {scale_problem} ")
    assert re.search(r"raises\.py --format agent  # fix the RuntimeError at \S+raises\.py:2, "
                     r"then run this again", lines[-1])  # no hint to point at


def test_json_and_agent_formats_conflict(krung, scale_problem, version):
    result = krung("run", scale_problem, version("good", GOOD), "--json", "--format", "agent")
    assert result.code == 2  # with --json, the error is the one JSON object on stdout
    assert "--json and --format agent ask for different outputs" in result.json()["error"]
    assert result.json()["hint"] == "give only one of them"
    same = krung("run", scale_problem, version("good", GOOD), "--rungs", "static", "--json",
                 "--format", "json")
    assert same.code == 0 and same.json()["ok"] is True


def test_summary_stays_short_whatever_the_run_holds():
    details = "\n".join(f"traceback line {i} " + "x" * 400 for i in range(200))
    failed_cases = [f"n={i},dtype=float32" for i in range(50)]
    run = Run(run_id="abcd1234", problem="p", problem_path="/p", solution="/v/k.py",
              source_sha256="0" * 64, device="cpu", source="def kernel(x):\n    return x\n",
              rungs=[
                  RungResult("static", Status.OK, figures={"dsl": "torch"}),
                  RungResult("compile", Status.FAILED, error="CompilationError: " + "y" * 900,
                             error_type="CompilationError", hint="use fewer registers",
                             location="/v/k.py:2", details=details),
                  RungResult("correctness", Status.FAILED, error="Mismatch: many",
                             error_type="Mismatch", figures={"failed_cases": failed_cases,
                                                             "cases": 60}),
              ])
    lines = check_shape(agent_summary(run))
    assert lines[0].startswith("FAILED at compile")
    assert lines[2].endswith("...") and len(lines[2]) == AGENT_LINE_CHARS  # clipped
    assert "where: /v/k.py:2" in lines
    assert "  2 | return x" in lines  # the source line, from the run
    assert "hint: use fewer registers" in lines
    assert lines[-1] == ("next: krung run /p /v/k.py --rungs static,compile,correctness "
                         "--format agent  # fix the CompilationError at /v/k.py:2 (see the "
                         "hint), then run this again (on the new version's file, if the fix is "
                         "a new file)")


def test_broken_evaluation_is_not_a_verdict_on_the_version():
    run = Run(run_id="abcd1234", problem="p", problem_path="/p", solution="/v/k.py",
              source_sha256="0" * 64, error="the judge process exited with status 1\nlog tail",
              rungs=[RungResult("static", Status.OK)])
    lines = check_shape(agent_summary(run))
    assert lines[0].startswith("ERROR (krung failed, not your version)")
    assert "error: the judge process exited with status 1" in lines
    assert "judge.log" in lines[-1]


def test_a_gpu_run_says_how_far_it_is_from_the_roofline_and_whether_to_stop(tmp_path):
    from krung.host.report import verdict
    from krung.host.store import Store
    from tests.recorded import matmul_history

    runs = matmul_history(Store(tmp_path / "k.db"))
    below = check_shape(agent_summary(runs["v3"]))
    assert below[0].startswith("OK (every rung passed)  run ")
    roofline = next(line for line in below if line.startswith("roofline: "))
    # geomean of 174/420, 1392/3100 and 304.5/720 us: the roofline's times over the version's
    assert roofline == ("roofline: below, 42.84% of the binding ceiling (geomean), 0/3 case(s) "
                        "at >= 90%; ceilings measured 2026-12-01T10:00:00+00:00 (kept in the "
                        "store)")
    assert "  M=8192,N=8192,K=8192,dtype=bfloat16: 44.9% of the bf16 peak (compute-bound, " \
        "354.7 TFLOP/s, 129.9 GB/s), below" in below
    # the next step comes from the measured limiter: the number to beat, the case, what to try
    problem = runs["v3"].problem_path
    # the run's own rungs, as recorded
    assert below[-1].startswith(f"next: krung run {problem} {runs['v3'].solution} --rungs "
                                "static,correctness,benchmark,roofline --format agent  # beat 174 us (the roofline) on case "
                                "M=4096,N=4096,K=4096,dtype=bfloat16, now 420 us (41% of the "
                                "bf16 peak); first try: ")
    at = check_shape(agent_summary(runs["v5"]))
    assert at[-1] == (f"next: krung best {problem}  # every bench case is at the roofline: "
                      "stop optimising this kernel, or cut the work itself (fewer bytes or "
                      "flops)")
    suspect = check_shape(agent_summary(runs["v6_suspect"]))
    assert suspect[0].startswith("FAILED at roofline  run ")
    assert "error: SuspectTime: faster than the roofline allows" in suspect
    assert any(line.startswith("roofline: suspect, ") for line in suspect)
    assert verdict(runs["v5"]) == f"OK  run {runs['v5'].run_id}: every rung passed"
    assert verdict(runs["v6_suspect"]) == f"FAILED  run {runs['v6_suspect'].run_id}: " \
        "roofline failed"


def test_a_case_timed_well_under_the_top_clock_says_so():
    def summary(timed_mhz: int) -> str:
        row = {"case": "n=4096", "median_us": 181.5, "p10_us": 180.0, "p90_us": 184.0,
               "ref_median_us": 190.0, "speedup": 1.05, "sm_mhz_timed": timed_mhz,
               "sm_max_mhz": 1980}
        run = Run(run_id="abcd1234", problem="p", problem_path="/p", solution="/v/k.py",
                  source_sha256="0" * 64, device="cuda",
                  rungs=[RungResult("benchmark", Status.OK,
                                    figures={"timer": "cupti", "geomean_us": 181.5,
                                             "speedup": 1.05, "per_case": [row]})])
        return agent_summary(run)

    slow = check_shape(summary(1707))
    case = next(line for line in slow if line.startswith("  n=4096: "))
    assert case.endswith("; timed at 1707 MHz, 14% under the top clock")
    assert "under the top clock" not in summary(1990)


def test_a_run_short_of_correctness_does_not_call_the_version_correct(krung, scale_problem,
                                                                     version, tmp_path, store):
    good = version("good", GOOD)
    # the turn's own options come back in the command: the rungs, the device, the format
    result = krung("run", "scale", "versions/good.py", "--rungs", "static,compile", "--device",
                   "cpu", "--format", "agent", "--store", store)
    assert result.code == 0, result.stdout + result.stderr
    next_line = summary_of(result.stdout).rstrip("\n").splitlines()[-1]
    assert next_line == (f"next: krung run scale versions/good.py --rungs "
                         f"static,compile,correctness --device cpu --format agent --store "
                         f"{store}  # nothing failed, but correctness was not asked for (rungs "
                         "static,compile): climb it")
    climbed = run_next(next_line, tmp_path, tmp_path / "elsewhere.db")  # --store given: kept
    assert climbed.code == 0, climbed.stdout + climbed.stderr
    assert summary_of(climbed.stdout).splitlines()[1] == (
        "rungs: static ok, compile ok, correctness ok")
    assert good.read_text() == GOOD.lstrip()


def test_a_case_whose_time_is_noisy_says_so_in_the_agent_summary():
    from krung.host.report import _benchmark_lines

    def row(ci_pct):
        return {"case": f"n={int(ci_pct * 100)}", "median_us": 10.0, "p10_us": 9.0,
                "p90_us": 14.0, "ref_median_us": 12.0, "speedup": 1.2, "ci_pct": ci_pct}

    rung = RungResult(name="benchmark", status=Status.OK, figures={
        "timer": "cupti", "geomean_us": 10.0, "speedup": 1.2,
        "per_case": [row(0.4), row(17.5)]})
    quiet, noisy = _benchmark_lines(rung)[1:3]
    assert "noisy" not in quiet
    assert noisy.endswith("; noisy: the median is known to +-17.5%, so differences below that "
                          "say nothing")
