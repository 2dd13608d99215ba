"""krung: a harness for developing GPU kernels in a verifiable loop.

The public API, loaded lazily: `import krung` imports nothing else, so the candidate worker
(which imports `krung.worker` and `krung.protocol` only) never loads the host's store, reports
or executors. The `krung` command and the MCP server use only what is exported here.

Where things live: `krung.protocol` (what crosses processes), `krung.worker` (the untrusted
side), `krung.judge` (problems, the ladder and its rungs), `krung.host` (the store, front ends,
reports, executors). docs/architecture.md draws the path of one evaluation through them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "run_batch": "krung.host.batch",
    "calibrate": "krung.host.calibrate",
    "calibrations": "krung.host.calibrate",
    "Calibration": "krung.judge.rungs.roofline.calibration",
    "ContextEntry": "krung.host.context",
    "add_context": "krung.host.context",
    "add_package_context": "krung.host.context",
    "list_context": "krung.host.context",
    "search_context": "krung.host.context",
    "diff_runs": "krung.host.diff",
    "Interrupted": "krung.protocol.errors",
    "KrungError": "krung.protocol.errors",
    "ProblemError": "krung.protocol.errors",
    "UsageError": "krung.protocol.errors",
    "evaluate": "krung.host.evaluate",
    "BEST_RULES": "krung.host.history_tree",
    "Entry": "krung.host.history_tree",
    "best_run": "krung.host.history_tree",
    "history": "krung.host.history_tree",
    "lineage": "krung.host.history_tree",
    "ReportFiles": "krung.host.html_report",
    "write_report": "krung.host.html_report",
    "DEFAULT_LADDER": "krung.judge.ladder",
    "RUNGS": "krung.judge.ladder",
    "select_rungs": "krung.judge.ladder",
    "builtin_problems": "krung.judge.problem",
    "detect_format": "krung.judge.problem",
    "find_problem": "krung.judge.problem",
    "history_name": "krung.judge.problem",
    "describe_problem": "krung.judge.problem.catalog",
    "list_problems": "krung.judge.problem.catalog",
    "agent_summary": "krung.host.report",
    "pin_problem": "krung.host.grading",
    "Run": "krung.protocol.results",
    "RungResult": "krung.protocol.results",
    "Status": "krung.protocol.results",
    "FILE_KINDS": "krung.host.runfiles",
    "RunFile": "krung.host.runfiles",
    "read_run_file": "krung.host.runfiles",
    "run_files": "krung.host.runfiles",
    "Executor": "krung.host.scale",
    "Job": "krung.host.scale",
    "Outcome": "krung.host.scale",
    "make_executor": "krung.host.scale",
    "run_schema": "krung.host.schema",
    "Settings": "krung.protocol.settings",
    "save_version": "krung.judge.solution",
    "Store": "krung.host.store",
    "summary_of": "krung.host.store",
    "SuiteEntry": "krung.host.suite",
    "SuiteResult": "krung.host.suite",
    "run_suite": "krung.host.suite",
    "watch": "krung.host.watch",
    "Workspace": "krung.host.workspace",
    "init_workspace": "krung.host.workspace",
}
_RENAMED = {"FILE_KINDS": "KINDS", "select_rungs": "select"}  # exported under another name than its module's

__all__ = [
    "BEST_RULES",
    "DEFAULT_LADDER",
    "FILE_KINDS",
    "RUNGS",
    "Calibration",
    "ContextEntry",
    "Entry",
    "Executor",
    "Interrupted",
    "Job",
    "KrungError",
    "Outcome",
    "ProblemError",
    "ReportFiles",
    "Run",
    "RunFile",
    "RungResult",
    "Settings",
    "Status",
    "Store",
    "SuiteEntry",
    "SuiteResult",
    "UsageError",
    "Workspace",
    "__version__",
    "add_context",
    "add_package_context",
    "agent_summary",
    "best_run",
    "builtin_problems",
    "calibrate",
    "calibrations",
    "describe_problem",
    "detect_format",
    "diff_runs",
    "evaluate",
    "find_problem",
    "history",
    "history_name",
    "init_workspace",
    "lineage",
    "list_context",
    "list_problems",
    "make_executor",
    "pin_problem",
    "read_run_file",
    "run_batch",
    "run_files",
    "run_schema",
    "run_suite",
    "save_version",
    "search_context",
    "select_rungs",
    "summary_of",
    "watch",
    "write_report",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'krung' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from krung.host.batch import run_batch
    from krung.host.calibrate import calibrate, calibrations
    from krung.host.context import (
        ContextEntry,
        add_context,
        add_package_context,
        list_context,
        search_context,
    )
    from krung.host.diff import diff_runs
    from krung.host.evaluate import evaluate
    from krung.host.history_tree import BEST_RULES, Entry, best_run, history, lineage
    from krung.host.html_report import ReportFiles, write_report
    from krung.host.report import agent_summary
    from krung.host.runfiles import KINDS as FILE_KINDS
    from krung.host.runfiles import RunFile, read_run_file, run_files
    from krung.host.scale import Executor, Job, Outcome, make_executor
    from krung.host.schema import run_schema
    from krung.host.store import Store, summary_of
    from krung.host.suite import SuiteEntry, SuiteResult, run_suite
    from krung.host.watch import watch
    from krung.host.workspace import Workspace, init_workspace
    from krung.judge.ladder import DEFAULT_LADDER, RUNGS
    from krung.judge.ladder import select as select_rungs
    from krung.judge.problem import builtin_problems, detect_format, find_problem, history_name
    from krung.judge.problem.catalog import describe_problem, list_problems
    from krung.judge.rungs.roofline.calibration import Calibration
    from krung.judge.solution import save_version
    from krung.protocol.errors import Interrupted, KrungError, ProblemError, UsageError
    from krung.protocol.results import Run, RungResult, Status
    from krung.protocol.settings import Settings
