"""A version (solution): one Python file with a `kernel` entry point, in any DSL.

Everything here reads the file without importing it: importing a version happens only in the
candidate worker.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from krung.protocol.errors import UsageError
from krung.protocol.messages import VersionChanged

ENTRY_POINT = "kernel"

@dataclass(frozen=True)
class Solution:
    path: Path  # the file as the user named it: errors and tracebacks name it
    source: str
    sha256: str
    data: bytes = field(default=b"", repr=False)  # its bytes, as read once by the host
    copy: Path | None = None  # the run's copy of those bytes, which judge and worker load

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def dsl(self) -> str:
        """Its DSL, from its imports (`torch` where it does not parse)."""
        try:
            return detect_dsl(ast.parse(self.source))
        except SyntaxError:
            return "torch"


def read_solution(path: str | Path) -> Solution:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no version file at {path}",
                         hint="give the path of a .py file that defines `kernel(*inputs)`")
    if file.suffix != ".py":
        raise UsageError(f"{path} is not a Python file",
                         hint="a version is one .py file that defines `kernel(*inputs)`")
    data = file.read_bytes()
    return Solution(path=file.resolve(), source=data.decode(errors="replace"),
                    sha256=hashlib.sha256(data).hexdigest(), data=data)


def read_copy(copy: str | Path, shown_as: str | Path, sha256: str) -> Solution:
    """The version from the run's copy of the bytes the host read, as the file the user
    named (`shown_as`); VersionChanged when the copy's bytes are not those (`sha256`)."""
    data = Path(copy).read_bytes()
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise VersionChanged(f"the run's copy of {shown_as} ({copy}) has sha256 {found}, "
                             f"not the {sha256} of the bytes krung read")
    return Solution(path=Path(shown_as), source=data.decode(errors="replace"), sha256=sha256,
                    data=data, copy=Path(copy))


def save_version(source: str, *, name: str | None = None,
                 store: str | Path | None = None) -> Path:
    """Write a version given as text to `<store dir>/versions/<name>-<sha>.py` and return the
    path; the same text gets the same file, so a re-sent version is not duplicated."""
    from krung.protocol.settings import Settings

    if not source.strip():
        raise UsageError("the version's source is empty",
                         hint=f"send the text of a Python file that defines `{ENTRY_POINT}`")
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", name or "").strip("._-")[:60] or "version"
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    folder = Path(store or Settings.from_env().store).parent / "versions"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{label.removesuffix('.py')}-{digest}.py"
    if not path.is_file():
        path.write_text(source)
    return path.resolve()


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    """(module, line) of every import in the file, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:  # relative: `from . import x`
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def detect_dsl(tree: ast.AST) -> str:
    """The version's DSL from its imports (krung.judge.dsls), e.g. `triton`, `cuda`, `cutedsl`."""
    from krung.judge import dsls

    return dsls.detect([name for name, _ in imported_modules(tree)]).name


def entry_point(tree: ast.Module, name: str = ENTRY_POINT,
                kind: str = "function") -> ast.AST | None:
    """The module-level statement that defines the entry point (`kernel` by default; a class
    when `kind` is "module"), if there is one."""
    defining = (ast.ClassDef,) if kind == "module" else (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, defining) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (alias.asname or alias.name) == name for alias in node.names):
            return node
    return None


def qualified_uses(tree: ast.Module) -> list[tuple[str, int]]:
    """(dotted name, line) of every name and attribute the file uses, with import aliases
    resolved (`F.softmax` -> `torch.nn.functional.softmax`). Attributes of values that are
    not imported modules (`x.softmax(...)`) read as methods of `torch.Tensor`."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = [node.attr]
            base: ast.AST = node.value
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            parts.reverse()
            if isinstance(base, ast.Name) and base.id in aliases:
                uses.append((".".join([aliases[base.id], *parts]), node.lineno))
            else:
                uses.append((f"torch.Tensor.{parts[-1]}", node.lineno))
        elif isinstance(node, ast.Name) and node.id in aliases:
            uses.append((aliases[node.id], node.lineno))
    return uses
