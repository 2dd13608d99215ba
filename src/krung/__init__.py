"""krung: a harness for developing GPU kernels in a verifiable loop.

The public API. The `krung` command and the MCP server use only what is exported here.
"""

from krung.batch import run_batch
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
from krung.ladder import DEFAULT_LADDER, RUNGS
from krung.problem import builtin_problems, find_problem
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
from krung.watch import watch
from krung.workspace import Workspace, init_workspace

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LADDER",
    "FILE_KINDS",
    "RUNGS",
    "ContextEntry",
    "Executor",
    "Job",
    "KrungError",
    "Outcome",
    "ProblemError",
    "Run",
    "RunFile",
    "RungResult",
    "Settings",
    "Status",
    "Store",
    "UsageError",
    "Workspace",
    "__version__",
    "add_context",
    "add_package_context",
    "agent_summary",
    "builtin_problems",
    "describe_problem",
    "diff_runs",
    "evaluate",
    "find_problem",
    "init_workspace",
    "list_context",
    "list_problems",
    "make_executor",
    "read_run_file",
    "run_batch",
    "run_files",
    "run_schema",
    "save_version",
    "search_context",
    "summary_of",
    "watch",
]
