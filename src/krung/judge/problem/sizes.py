"""The module-level constants of a KernelBench file, and what follows from each.

KernelBench files set their sizes as module-level constants that `get_inputs()` and
`get_init_inputs()` read (`batch_size = 16`, `depth, height, width = 16, 64, 64`), and some
derive constants from others (`input_shape = (num_classes,)`, `groups = in_channels`,
`bias_shape = (out_channels, 1, 1)`). When krung moves a size (an unseen case, a scaled run)
what derives from it moves too: otherwise the inputs disagree with each other (level-1
95_CrossEntropyLoss: predictions over the old number of classes, targets drawn below the new).
The file is parsed, never re-imported; a derived constant is recomputed by evaluating its
own expression over the new values.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass
class Assignment:
    targets: list[str]  # `a = ...`, `a, b, c = ...`, or `a = b = ...` (`chained`)
    value: ast.expr
    reads: list[str]  # the module-level constants the value reads, in order
    chained: bool = False  # every target gets the whole value (`height = width = 256`)


class Constants:
    """The file's module-level assignments in order, and the names each function reads."""

    def __init__(self, path: Path, module: ModuleType):
        tree = ast.parse(path.read_text(errors="replace"), filename=str(path))
        self.path = path
        self.module = module
        found = []
        for node in tree.body:
            targets, chained = _targets(node)
            if targets and node.value is not None:  # type: ignore[attr-defined]
                found.append(Assignment(targets, node.value, [],  # type: ignore[attr-defined]
                                        chained))
        self.assignments = found
        names = {t for a in found for t in a.targets}
        for assignment in found:
            assignment.reads = [n for n in names_read(assignment.value) if n in names]
        self.by_name = {t: a for a in found for t in a.targets}
        self.base: dict[str, Any] = {n: getattr(module, n) for n in names if hasattr(module, n)}
        self.declared = dict(self.base)  # as the file has them, before any `rebase`
        self.bodies = {node.name: node for node in tree.body
                       if isinstance(node, (ast.FunctionDef, ast.ClassDef))}

    def read_by(self, name: str) -> list[str]:
        """The constants a function or class of the file reads, in the order it first does."""
        body = self.bodies.get(name)
        return [n for n in names_read(body) if n in self.by_name] if body else []

    def roots(self, names: list[str]) -> list[str]:
        """The constants `names` come from: each name that is set from no other constant,
        and for a derived one, the constants its value reads (recursively), in order."""
        found: list[str] = []
        seen: set[str] = set()

        def visit(name: str) -> None:
            if name in seen:
                return
            seen.add(name)
            reads = self.by_name[name].reads if name in self.by_name else []
            if not reads and name not in found:
                found.append(name)
            for read in reads:
                visit(read)

        for name in names:
            visit(name)
        return found

    def derive(self, changes: dict[str, Any]) -> dict[str, Any]:
        """The constants that differ from the file's values once `changes` are made: the
        changes themselves and every constant derived from them, recomputed in file order.
        A derived value whose expression fails keeps its old value."""
        values = dict(changes)
        for assignment in self.assignments:
            if not any(r in values for r in assignment.reads) or all(
                    t in changes for t in assignment.targets):
                continue
            namespace = {**vars(self.module), **values}
            try:
                result = eval(compile(ast.Expression(assignment.value), str(self.path), "eval"),
                              namespace)
                unpacked = _unpack(assignment.targets, result, assignment.chained)
            except Exception:  # the problem's own expression: leave this constant as it is
                continue
            for target, value in unpacked.items():
                if target not in changes and not _same(value, self.base.get(target)):
                    values[target] = value
        return values

    @contextlib.contextmanager
    def applied(self, changes: dict[str, Any]) -> Iterator[None]:
        """The module with `changes` (and what derives from them) in place, restored after."""
        values = self.derive(changes)
        saved = {name: getattr(self.module, name) for name in values}
        try:
            for name, value in values.items():
                setattr(self.module, name, value)
            yield
        finally:
            for name, value in saved.items():
                setattr(self.module, name, value)

    def rebase(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Make `changes` (and what derives from them) the module's values for good; returns
        every constant that changed."""
        values = self.derive(changes)
        for name, value in values.items():
            setattr(self.module, name, value)
            self.base[name] = value
        return values


def names_read(node: ast.AST) -> list[str]:
    """The names a piece of code reads from its module, in the order it first reads them:
    loads of names that no function or comprehension inside it binds (a parameter `dim` of
    Model.__init__ is not the module's `dim`)."""
    bound: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = sub.args
            bound |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                      args.vararg, args.kwarg) if a is not None}
            bound |= {n.id for n in ast.walk(sub)
                      if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        elif isinstance(sub, ast.comprehension):
            bound |= {n.id for n in ast.walk(sub.target) if isinstance(n, ast.Name)}
    found: list[str] = []
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound
                and sub.id not in found):
            found.append(sub.id)
    return found


def _targets(node: ast.stmt) -> tuple[list[str], bool]:
    """The names a module-level assignment sets, and whether it is chained (`a = b = 256`:
    each gets the whole value, and each is a size of its own, free to move apart)."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id], False
    if not isinstance(node, ast.Assign):
        return [], False
    if len(node.targets) > 1:
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        return (names, True) if len(names) == len(node.targets) else ([], False)
    target = node.targets[0]
    if isinstance(target, ast.Name):
        return [target.id], False
    if isinstance(target, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Name) for e in target.elts):
        return [e.id for e in target.elts], False  # type: ignore[attr-defined]
    return [], False


def _unpack(targets: list[str], value: Any, chained: bool = False) -> dict[str, Any]:
    if len(targets) == 1 or chained:
        return dict.fromkeys(targets, value)
    values = list(value)
    if len(values) != len(targets):
        raise ValueError("unpacking mismatch")
    return dict(zip(targets, values, strict=True))


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # values that do not compare to a bool (tensors): take them as changed
        return False
