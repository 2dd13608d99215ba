"""krung: a harness for developing GPU kernels in a verifiable loop.

The public API. The `krung` command and the MCP server use only what is exported here.
"""

from krung.context import (
    ContextEntry,
    add_context,
    add_package_context,
    list_context,
    search_context,
)
from krung.errors import KrungError, ProblemError, UsageError
from krung.evaluate import evaluate
from krung.ladder import DEFAULT_LADDER, RUNGS
from krung.problem import builtin_problems, find_problem
from krung.results import Run, RungResult, Status
from krung.settings import Settings
from krung.store import Store
from krung.watch import watch
from krung.workspace import Workspace, init_workspace

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LADDER",
    "RUNGS",
    "ContextEntry",
    "KrungError",
    "ProblemError",
    "Run",
    "RungResult",
    "Settings",
    "Status",
    "Store",
    "UsageError",
    "Workspace",
    "__version__",
    "add_context",
    "add_package_context",
    "builtin_problems",
    "evaluate",
    "find_problem",
    "init_workspace",
    "list_context",
    "search_context",
    "watch",
]
