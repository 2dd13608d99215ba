"""Reading compute-sanitizer's logs: a log cut short must not read as clean."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from krung.judge.candidate import Candidate
from krung.judge.rungs.determinism import sanitize
from krung.judge.rungs.determinism.sanitize import (
    ERROR_EXIT,
    parse_report,
    read_log,
    with_exit_code,
)
from tests.conftest import GOOD, write

# memcheck's log of a Triton kernel reading past its input's end, as the H200 wrote it when
# the worker was killed before the tool could write its summary (shortened backtrace).
CUT_SHORT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at _past_the_end+0x110 in oob.py:9
=========     by thread (2,0,0) in block (16,0,0)
=========     Access to 0x7f1b92802008 is out of bounds
=========     and is 3 bytes after the nearest allocation at 0x7f1b92800000 of size 8,198 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: launch [0x1da3] in __triton_launcher.cpython-312-x86_64-linux-gnu.so
========= Invalid __global__ read of size 2 bytes
=========     at _past_the_end+0x110 in oob.py:9
=========     by thread (3,0,0) in block (16,0,0)
"""


def test_a_log_cut_short_counts_the_errors_it_lists_and_says_it_is_incomplete():
    found = parse_report(CUT_SHORT)
    assert found["errors"] == 2
    assert found["first"] == "Invalid __global__ read of size 2 bytes"
    assert not found["complete"]


def test_the_summary_gives_the_count_of_a_complete_log():
    found = parse_report(CUT_SHORT + "=========\n========= ERROR SUMMARY: 37 errors\n")
    assert (found["errors"], found["complete"]) == (37, True)
    clean = parse_report("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    assert (clean["errors"], clean["first"], clean["complete"]) == (0, "", True)
    race = parse_report("========= COMPUTE-SANITIZER\n"
                        "========= Error: Race reported between Write access at k+0x80\n"
                        "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    assert (race["errors"], race["complete"]) == (1, True)
    assert race["first"].startswith("Error: Race reported")


def test_racechecks_warnings_are_counted_apart_and_do_not_fail():
    # Warnings: hazards racecheck deems benign (warp-synchronous code).
    benign = parse_report("========= COMPUTE-SANITIZER\n"
                          "========= Warning: Race reported between Read access at k+0x40\n"
                          "========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 "
                          "warnings)\n")
    assert (benign["errors"], benign["warnings"], benign["complete"]) == (0, 2, True)
    assert with_exit_code(benign, ERROR_EXIT)["errors"] == 0


def test_a_log_with_nothing_in_it_is_incomplete_not_clean():
    assert parse_report("") == {"errors": 0, "first": "", "complete": False, "warnings": 0,
                                "report": ""}
    assert not parse_report("========= COMPUTE-SANITIZER\n")["complete"]


def test_the_tools_exit_status_overrules_its_log():
    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    assert with_exit_code(parse_report(clean), 0)["complete"]
    # errors by its status, whatever the log says (a summary the version wrote, say)
    flagged = with_exit_code(parse_report(clean), ERROR_EXIT)
    assert (flagged["errors"], flagged["complete"]) == (1, True)
    # a tool that did not end by itself: killed (None), or by a signal the version sent it
    assert not with_exit_code(parse_report(clean), None)["complete"]
    assert not with_exit_code(parse_report(clean), -9)["complete"]
    assert with_exit_code(parse_report(CUT_SHORT), ERROR_EXIT)["errors"] == 2


def test_the_log_is_read_only_as_a_plain_file(tmp_path):
    log = tmp_path / "sanitizer-memcheck.txt"
    log.write_text(CUT_SHORT)
    assert read_log(log) == CUT_SHORT
    assert read_log(log, limit=30) == CUT_SHORT[:30]
    link = tmp_path / "link.txt"  # a version could put a link to /dev/zero there
    link.symlink_to("/dev/zero")
    assert read_log(link) == ""
    fifo = tmp_path / "fifo.txt"  # or a FIFO nobody writes: reading must not block
    os.mkfifo(fifo)
    assert read_log(fifo) == ""
    assert read_log(tmp_path / "missing.txt") == ""


def _under_a_tool_that_reports_at_exit(tmp_path: Path, report: Path) -> Candidate:
    """A worker under a stand-in for compute-sanitizer: a shell that runs it, then writes."""
    tool = ["sh", "-c", f'"$@"; echo "ERROR SUMMARY: 0 errors" > {shlex.quote(str(report))}',
            "tool"]
    candidate = Candidate("cpu", tmp_path, write(tmp_path / "good.py", GOOD), prefix=tool)
    candidate.start()
    candidate.hello(60)
    return candidate


def test_finish_lets_the_tool_a_worker_runs_under_write_its_report(tmp_path):
    finished = tmp_path / "finished.txt"
    assert _under_a_tool_that_reports_at_exit(tmp_path, finished).finish(60) == 0
    assert parse_report(finished.read_text())["complete"]
    killed = tmp_path / "killed.txt"
    _under_a_tool_that_reports_at_exit(tmp_path, killed).close()
    assert not killed.exists()  # why the sanitizer's workers are finished, not closed


DIES_IN_THE_CALL = """
import os
def kernel(x):
    os._exit(3)  # as the worker ends after the illegal access memcheck stopped
"""


def test_a_worker_that_ends_mid_call_leaves_the_verdict_to_the_tool(tmp_path, monkeypatch):
    # As on the H200: memcheck found a read past the end, the worker ended during the call,
    # and the tool exited with its error status. That status must reach the verdict, not a
    # WorkerCrashed. A stand-in compute-sanitizer on PATH drops its options, runs the worker,
    # writes no summary and exits with the error status; the worker runs on the CPU.
    tools = tmp_path / "bin"
    tools.mkdir()
    stand_in = tools / "compute-sanitizer"
    stand_in.write_text(f'#!/bin/sh\nwhile [ "$1" != {shlex.quote(sys.executable)} ]; do shift; done\n'
                        f'"$@"\nexit {ERROR_EXIT}\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sanitize, "TOOLS", ("memcheck",))
    version = write(tmp_path / "dies.py", DIES_IN_THE_CALL)
    ctx = SimpleNamespace(
        device="cpu", run_dir=tmp_path, solution=SimpleNamespace(path=version),
        settings=SimpleNamespace(compile_timeout_s=30, sandbox="cpu"),
        load_message=lambda: {"op": "load", "path": str(version)},
        make_inputs=lambda case, seed: (torch.randn(64) + 2,), seed_for=lambda *parts: 1,
        problem=SimpleNamespace(writable_leaves=lambda inputs: set()))
    found = sanitize.run_sanitizers(ctx, {})["memcheck"]
    assert found["exit_code"] == ERROR_EXIT and found["errors"] >= 1, found
    assert not found["ran"]["ok"] and found["ran"]["error"]["type"] == "WorkerCrashed"
