"""The text of the files `krung init` writes: a first version per DSL, and the agent's guide.

The texts are package data under krung/templates/: `versions/<dsl>.py` (real Python files,
so ruff lints them) and `workspace/` (AGENTS.md, CLAUDE.md, ...). Markers are `{{name}}`
(filled by `fill`), so the C++ and Python braces stay as they are; a comment line that holds
only a marker (`# {{entry}}`) is replaced whole, which keeps the Python templates valid.
Each first version holds an elementwise example kernel (SiLU, the operation of the template
problem): with the template problem `kernel` calls it; with any other problem `kernel` has
the reference's signature and raises NotImplementedError where the real kernel goes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

DSL_NAMES = {
    "triton": "Triton",
    "cuda": "CUDA C++ (torch.utils.cpp_extension.load_inline)",
    "cutedsl": "CuTeDSL (CUTLASS's Python DSL)",
    "tilelang": "TileLang",
}
DSL_SHORT = {"triton": "Triton", "cuda": "CUDA C++", "cutedsl": "CuTeDSL", "tilelang": "TileLang"}
# What to add to context/ first, for each DSL.
CONTEXT_HINTS = {
    "triton": "krung context add --package triton",
    "cuda": "krung context add cutlass https://github.com/NVIDIA/cutlass",
    "cutedsl": "krung context add --package cutlass",
    "tilelang": "krung context add --package tilelang",
}


TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def fill(template: str, **values: str) -> str:
    def value(match: re.Match) -> str:
        return values[match.group(1)]

    whole_lines = re.sub(r"(?m)^# \{\{(\w+)\}\}\n?", value, template)
    return re.sub(r"\{\{(\w+)\}\}", value, whole_lines)


def version(dsl: str) -> str:
    """The first version's template in `dsl` (triton, cuda, cutedsl, tilelang)."""
    return (TEMPLATES / "versions" / f"{dsl}.py").read_text()


def workspace_file(name: str) -> str:
    """A workspace file's template: AGENTS.md, CLAUDE.md, gitignore, checks.txt."""
    return (TEMPLATES / "workspace" / name).read_text()


SKELETON_ENTRY = '''\
def kernel({{signature}}):
    # TODO: allocate the output(s) (torch.empty, with the dtype, shape and device the reference
    # returns), launch your kernel on the inputs, and return the output(s). The example above
    # shows the pattern for one elementwise input.
    raise NotImplementedError(
        "{{versions}}/v1.py is a skeleton: write the kernel for {{problem}} in a new file, "
        "{{versions}}/v2.py, starting from this one")
'''

WORKING_ENTRY = '''\
def kernel(x):
    return silu(x)
'''


def mcp_json(command: list[str]) -> str:
    """`.mcp.json`: krung's MCP server for Claude Code, started as `command mcp`."""
    server = {"command": command[0], "args": [*command[1:], "mcp"]}
    return json.dumps({"mcpServers": {"krung": server}}, indent=2) + "\n"
