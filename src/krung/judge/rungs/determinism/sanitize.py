"""compute-sanitizer over one call of a version: memcheck, racecheck and initcheck.

Each tool runs a fresh worker under `compute-sanitizer --tool T`, which loads the version and
makes one checked call on the given case; the tool's report (its log file) is parsed for the
error count and the first error. Slow (each tool replays every access), so only on request.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from krung.judge.candidate import Candidate, raises_walls
from krung.judge.ladder import Context, poison_leaves
from krung.judge.rungs.determinism import TOOLS
from krung.protocol import messages, tree
from krung.protocol.errors import RungFailed
from krung.worker.guard import NAN_BYTE

_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error", re.IGNORECASE)
# "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)": warnings are the hazards
# racecheck deems benign (warp-synchronous code, say); they are counted apart, not failed on.
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed"
                           r"(?: \((\d+) errors?, (\d+) warnings?\))?", re.IGNORECASE)
# The first line of each error record: "========= Invalid __global__ read of size 2 bytes".
_RECORD = re.compile(r"^=========\s+(Invalid|Uninitialized|Program hit|Barrier|"
                     r"Error: (Race|Potential))", re.IGNORECASE)
EXIT_TIMEOUT_S = 60  # for the worker to exit and the tool to write its summary
ERROR_EXIT = 86  # the tool's exit status when it found errors (--error-exitcode)
LOG_LIMIT_BYTES = 16 << 20
PADDING_BYTES = 4096  # after every allocation under memcheck; cudaMalloc packs them back to back


def run_sanitizers(ctx: Context, case: dict) -> dict[str, dict[str, Any]]:
    executable = shutil.which("compute-sanitizer")
    if executable is None:
        raise RungFailed("ToolMissing", "--sanitize needs compute-sanitizer, which is not on "
                         "PATH", "install the CUDA toolkit's compute-sanitizer, or drop "
                         "--sanitize")
    findings = {}
    for tool in TOOLS:
        log = ctx.run_dir / f"sanitizer-{tool}.txt"
        # API errors are not the device code's (libraries probe the driver and get errors
        # they expect): left out of the count, as the version sees them as exceptions anyway.
        prefix = [executable, "--tool", tool, "--log-file", str(log), "--print-limit", "20",
                  "--error-exitcode", str(ERROR_EXIT), "--report-api-errors", "no"]
        if tool == "racecheck":
            prefix += ["--racecheck-report", "hazard"]
        if tool == "memcheck":  # red zones, or a read just past a tensor lands in the next one
            prefix += ["--padding", str(PADDING_BYTES)]
        # Without torch's caching allocator every tensor is its own allocation, so memcheck
        # sees an access past a tensor's end instead of one inside a cached block.
        candidate = Candidate(ctx.device, ctx.run_dir, ctx.solution.path, cuda_ipc=False,
                              prefix=prefix, log_name=f"worker-{tool}.log",
                              env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
                              exit_wait_s=EXIT_TIMEOUT_S)
        candidate.walls = raises_walls(ctx.settings.sandbox, ctx.device)
        candidate.start()
        try:
            try:
                reply = _one_call(ctx, case, candidate, tool)
            except RungFailed as exc:  # e.g. the worker ended on the error the tool found
                reply = failed_reply(exc)
            # The tool writes its error summary as the worker exits: let it exit.
            code = candidate.finish(EXIT_TIMEOUT_S)
        finally:
            candidate.close()
        findings[tool] = with_exit_code(parse_report(read_log(log)), code)
        # Whether the version ran under the tool: a clean log of a version that raised (or
        # did not load) checked nothing. The rung looks at it after the errors, which
        # explain a call that failed on an illegal access.
        findings[tool]["ran"] = {"ok": bool(reply.get("ok")), "error": reply.get("error")}
    return findings


def _one_call(ctx: Context, case: dict, candidate: Candidate, tool: str) -> dict[str, Any]:
    """Load the version under the tool and make one call on poisoned, fresh inputs."""
    timeout = ctx.settings.compile_timeout_s * 4
    reply = candidate.request(ctx.load_message(), timeout, f"loading under {tool}")
    if not reply.get("ok"):
        return reply
    inputs = ctx.make_inputs(case, ctx.seed_for("sanitize", tool))
    inputs = poison_leaves(inputs, ctx.problem.writable_leaves(inputs), NAN_BYTE)
    cpu = tree.map_tensors(lambda t: t.cpu(), list(inputs))
    return candidate.request(messages.Call(inputs=cpu), timeout, f"one call under {tool}")


def failed_reply(exc: RungFailed) -> dict[str, Any]:
    """A worker's failure as the reply it would have sent: under memcheck the worker may end
    on the error the tool found (the tool's exit status then says so), which is the tool's
    verdict to give, not a crash of the rung."""
    return {"ok": False, "error": {"type": exc.error_type, "message": exc.message,
                                   "location": exc.location, "details": exc.details}}


def read_log(path: Path, limit: int = LOG_LIMIT_BYTES) -> str:
    """The tool's log, read without trusting what sits at its path: the version runs in the
    same folder and could put a FIFO or a link to /dev/zero there. Not a plain file: ''."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return ""
        return f.read(limit).decode(errors="replace")


def with_exit_code(found: dict[str, Any], code: int | None) -> dict[str, Any]:
    """The tool's exit status settles what its log claims: ERROR_EXIT means errors whatever
    the log says, and a log is complete only from a tool that ended by itself (a version
    that killed its tool, or wrote a summary of its own into the log, gains nothing)."""
    benign = found["complete"] and found["errors"] == 0 and found.get("warnings")
    if code == ERROR_EXIT and not benign:  # (racecheck's warnings may set the status too)
        found["errors"] = max(found["errors"], 1)
    elif code != 0:
        found["complete"] = False
    found["exit_code"] = code
    return found


def parse_report(report: str) -> dict[str, Any]:
    """The error count of a compute-sanitizer log, its first error, and whether the log is
    complete (ends in the tool's summary). A log cut short still counts the errors it lists."""
    counts = [int(m) for m in _SUMMARY.findall(report)]
    warnings = 0
    for hazards, errors, warned in _RACE_SUMMARY.findall(report):
        counts.append(int(errors or hazards))
        warnings += int(warned or 0)
    records = [line.strip("= ").strip() for line in report.splitlines()
               if _RECORD.match(line)]
    return {"errors": max([*counts, len(records)]), "first": records[0] if records else "",
            "complete": bool(counts), "warnings": warnings, "report": report[-8000:]}
