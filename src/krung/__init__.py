"""krung: a harness for developing GPU kernels in a verifiable loop.

The public API. The `krung` command and the MCP server use only what is exported here.
"""

from krung.batch import run_batch
from krung.calibration import Calibration, calibrate, calibrations
from krung.context import (
    ContextEntry,
    add_context,
    add_package_context,
    list_context,
    search_context,
)
from krung.diff import diff_runs
from krung.errors import KrungError, ProblemError, UsageError
from krung.evaluate import evaluate
from krung.history_tree import BEST_RULES, Entry, best_run, history, lineage
from krung.html_report import ReportFiles, write_report
from krung.ladder import DEFAULT_LADDER, RUNGS
from krung.problem import builtin_problems, detect_format, find_problem, history_name
from krung.problem.catalog import describe_problem, list_problems
from krung.report import agent_summary
from krung.results import Run, RungResult, Status
from krung.runfiles import KINDS as FILE_KINDS
from krung.runfiles import RunFile, read_run_file, run_files
from krung.scale import Executor, Job, Outcome, make_executor
from krung.schema import run_schema
from krung.settings import Settings
from krung.solution import save_version
from krung.store import Store, summary_of
from krung.suite import SuiteEntry, SuiteResult, run_suite
from krung.watch import watch
from krung.workspace import Workspace, init_workspace

__version__ = "0.1.0"

__all__ = [
    "BEST_RULES",
    "DEFAULT_LADDER",
    "FILE_KINDS",
    "RUNGS",
    "Calibration",
    "ContextEntry",
    "Entry",
    "Executor",
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
    "read_run_file",
    "run_batch",
    "run_files",
    "run_schema",
    "run_suite",
    "save_version",
    "search_context",
    "summary_of",
    "watch",
    "write_report",
]
