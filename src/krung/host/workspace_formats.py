"""KernelBench and GPU MODE problems in a workspace (`krung init --from`): the files each
needs beside it, its first version, and how AGENTS.md describes it. Written from the source
text, never imported.

A first version of either is the reference itself in a version's shape (KernelBench's
`Model` as `ModelNew`; GPU MODE's `ref_kernel` as `custom_kernel`): it passes every check,
computing with torch (krung reports it `delegated`), and shows exactly what a version must
define; the agent's own kernel replaces its torch calls in v2.py.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

from krung.judge.problem import GPUMODE, KERNELBENCH
from krung.judge.problem.files import brought_by_task
from krung.protocol.errors import UsageError

# GPU MODE's reference.py functions that belong to the problem, not to a version.
_PROBLEM_ONLY = ("generate_input", "check_implementation")


def reference_file(path: Path, kind: str) -> Path:
    """The file that defines the reference (what the agent reads first)."""
    return path / "reference.py" if kind == GPUMODE else path


def first_version(kind: str, reference: Path, title: str, versions: str) -> str:
    text = reference.read_text()
    if kind == KERNELBENCH:
        body = re.sub(r"(?<![\w.])Model(?!\w)", "ModelNew", text)
        shape = ("`Model` renamed `ModelNew`. Keep ModelNew's constructor and the names of its "
                 "parameters: krung loads the reference's weights into them.")
    else:
        body = re.sub(r"(?<![\w.])ref_kernel(?!\w)", "custom_kernel",
                      _without(text, _PROBLEM_ONLY))
        shape = ("`ref_kernel` renamed `custom_kernel` (generate_input and "
                 "check_implementation are the problem's: they stay in reference.py).")
    header = (f"First version of {title}: the reference itself, {shape} It passes every "
              "check but computes with torch (krung reports it `delegated`). Write your "
              f"kernel as {versions}/v2.py, starting from this file: replace the torch calls "
              "that do the work with your kernel's launch.")
    return textwrap.fill(header, width=96, initial_indent="# ", subsequent_indent="# ") \
        + "\n\n" + body


def _without(text: str, names: tuple[str, ...]) -> str:
    """`text` without the module-level definitions of the names: functions (with their
    decorators) and assignments (`check_implementation = make_match_reference(ref_kernel)`)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for node in tree.body:
        defined = ([node.name] if isinstance(node, ast.FunctionDef) else
                   [t.id for t in node.targets if isinstance(t, ast.Name)]
                   if isinstance(node, ast.Assign) else [])
        if set(defined) & set(names):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            drop.update(range(first - 1, node.end_lineno or node.lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def what_is_here(kind: str, shown: str) -> str:
    """AGENTS.md's bullet for the problem files of one format; `shown` names them."""
    if kind == KERNELBENCH:
        text = (f"{shown} (KernelBench's format): `Model` is the slow, clear definition your "
                "kernel must match; `get_init_inputs()` gives its constructor's arguments, "
                "`get_inputs()` its inputs at the declared sizes (krung also checks awkward "
                "neighbours of them). Read it first.")
    else:
        text = (f"{shown} (GPU MODE's format): in `reference.py`, `ref_kernel(data)` is the "
                "slow, clear definition your kernel must match, `generate_input(...)` makes "
                "the data and `check_implementation` decides what is close enough; "
                "`task.yml` lists the `tests` (checked) and `benchmarks` (timed) cases. Read "
                "both first.")
    return textwrap.fill(text, width=96, initial_indent="- ", subsequent_indent="  ")


def entry(kind: str) -> str:
    """What a version of a problem of this format defines, in words."""
    if kind == KERNELBENCH:
        return ("`class ModelNew(nn.Module)` with `Model`'s constructor arguments and "
                "parameter names, whose `forward` takes `Model.forward`'s inputs and returns "
                "its output(s)")
    return ("`custom_kernel(data)`: it takes the data `generate_input` makes and returns what "
            "`ref_kernel` returns (written into the output buffer the data carries, where it "
            "carries one); it may import task.py and utils.py, not reference.py")


def support_files(path: Path, kind: str) -> list[tuple[Path, str]]:
    """Files a GPU MODE problem takes from outside its folder (task.yml's `files`, such as
    `../utils.py`), each with where it goes relative to the folder's parent."""
    if kind != GPUMODE:
        return []
    found = []
    for file in brought_by_task(path):
        if not file.is_relative_to(path.parent.resolve()):
            raise UsageError(f"{path} takes {file.name} from further up than its parent "
                             "folder", hint="copy the problem with that file beside it, or run "
                                            "it as it is: krung run PROBLEM VERSION.py")
        found.append((file, str(file.relative_to(path.parent.resolve()))))
    return found
