"""static: the version parses, defines the entry point its format asks for (`kernel`; a
KernelBench `class ModelNew`; GPU MODE's `custom_kernel`), keeps away from the reference, and
uses none of the names the problem forbids (e.g. `torch.matmul` for a matmul problem).

Reads the file; imports nothing. The runtime operator trace in the correctness rung catches
what a source check cannot (getattr tricks, fallbacks behind try/except).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from krung.judge.ladder import Context
from krung.judge.rungs.spec import AGENT, HTML, Figure, RungSpec
from krung.judge.solution import (
    detect_dsl,
    entry_point,
    imported_modules,
    qualified_uses,
)
from krung.protocol.errors import RungFailed

SPEC = RungSpec(
    "static", order=10,
    checks="the file parses, defines the entry point its format asks for (`kernel` at module "
           "level; KernelBench's `ModelNew`; GPU MODE's `custom_kernel`), does not import the "
           "problem or its reference, and uses none of the names the problem forbids (import "
           "aliases resolved)",
    figures=(
        Figure("dsl", "", "the DSL the version uses: triton, cuda, cupy, numba, cutedsl, "
               "tilelang, torch, ...", "text"),
        Figure("lines", "", "lines in the version's file", "count"),
        Figure("sha256", "", "the first 12 hex digits of the SHA-256 of the version's source",
               "text"),
        Figure("l2_hints", "", "L2 eviction-priority hints in the version's source, with their "
               "lines (Triton's eviction_policy='evict_last', PTX's L2::evict_last, "
               "createpolicy and L2::cache_hint, CUDA's access_property::persisting): the "
               "benchmark rung says them", "list", when="when the source has one"),
        Figure("pasted_kernels", "", "kernels whose names or helpers are those of a known "
               "library's, with their lines and the library (torch.compile's Inductor output, "
               "Liger-Kernel, FlashAttention's Triton kernels): the work may not be the "
               "version's own", "list", shown=(HTML, AGENT), when="when the source has one"),
    ))
# Known libraries' kernels pasted into a version: names Inductor generates, and the helpers and
# constants that come with a library's kernels (a name an author could choose alone is not here).
PASTED_NAMES = ((re.compile(r"^triton_(poi|per|red|tem|for)_\w*fused"),
                 "torch.compile's Inductor output"),)
PASTED_MARKERS = ((re.compile(r"\b(triton_helpers|triton_heuristics|torch\._inductor)\b"),
                   "torch.compile's Inductor output"),
                  (re.compile(r"\b(liger_kernel|_CASTING_MODE_LLAMA|_CASTING_MODE_GEMMA)\b"),
                   "Liger-Kernel"),
                  (re.compile(r"^\s*(from|import)\s+flash_attn\b"), "FlashAttention"))
# Lines marked to stay in L2 can outlive the flush between timed calls (its writes have
# normal priority), so a time may include L2 hits a cold call would not have.
L2_HINTS = re.compile(r"evict_last|EVICT_LAST|createpolicy|L2::cache_hint|"
                      r"access_property::persisting|__nv_associate_access_property")

_ENTRY_HINTS = {
    "native": "define `def kernel(*inputs)` at module level, taking the reference's inputs "
              "in the same order and returning its outputs",
    "kernelbench": "define `class ModelNew(torch.nn.Module)` at module level, with the "
                   "reference Model's constructor arguments, parameters and forward signature",
    "gpumode": "define `def custom_kernel(data)` at module level, taking the data object "
               "generate_input makes and returning the output, as submission.py does",
}


def run(ctx: Context) -> dict[str, Any]:
    solution = ctx.solution
    try:
        tree = ast.parse(solution.source, filename=str(solution.path))
    except SyntaxError as exc:
        line = (exc.text or "").rstrip("\n")
        caret = " " * max((exc.offset or 1) - 1, 0) + "^"
        raise RungFailed("SyntaxError", exc.msg, "fix the syntax at the line shown",
                         location=f"{solution.path}:{exc.lineno}",
                         details=f"{exc.lineno:5d} | {line}\n        {caret}") from None
    entry = ctx.problem.entry
    if entry_point(tree, entry["name"], entry["kind"]) is None:
        what = "class" if entry["kind"] == "module" else "function"
        raise RungFailed("EntryPointMissing",
                         f"{solution.name} defines no {what} `{entry['name']}`",
                         _ENTRY_HINTS.get(ctx.problem.format, _ENTRY_HINTS["native"]),
                         location=str(solution.path))
    forbidden = _problem_modules(ctx)
    for module, line in imported_modules(tree):
        if module.split(".")[0] in forbidden:
            raise RungFailed("ImportsReference", f"line {line} imports `{module}` from the problem",
                             "a version must compute the result itself: do not import the "
                             "problem or its reference",
                             location=f"{solution.path}:{line}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(
                f"{name}.py" in node.value for name in forbidden):
            raise RungFailed("ImportsReference",
                             f"line {node.lineno} names the problem's file ({node.value!r})",
                             "a version must not read or load the problem's files",
                             location=f"{solution.path}:{node.lineno}")
    _check_forbidden(ctx, tree)
    _check_shadowing(ctx, tree)
    figures = {"dsl": detect_dsl(tree), "lines": len(solution.source.splitlines()),
               "sha256": solution.sha256[:12]}
    code = without_prose(solution.source, tree)
    hints = l2_hints(code)
    if hints:
        figures["l2_hints"] = hints
    pasted = pasted_kernels(tree, code)
    if pasted:
        figures["pasted_kernels"] = pasted
    return figures


def pasted_kernels(tree: ast.Module, source: str) -> list[str]:
    """`NAME (line N): LIBRARY` for each function named as a known library names its kernels,
    and `MARKER (line N): LIBRARY` for the first of each library's helpers in the source."""
    found = [f"{node.name} (line {node.lineno}): {library}" for node in ast.walk(tree)
             if isinstance(node, ast.FunctionDef)
             for pattern, library in PASTED_NAMES if pattern.search(node.name)]
    named = {entry.split(": ", 1)[1] for entry in found}
    for pattern, library in PASTED_MARKERS:
        if library in named:
            continue
        for number, line in enumerate(source.splitlines(), 1):
            match = pattern.search(line)
            if match:
                found.append(f"{match.group(0)} (line {number}): {library}")
                named.add(library)
                break
    return found


def without_prose(source: str, tree: ast.Module) -> str:
    """The source with its comments and docstrings blanked, lines kept: words about a hint
    or a library are not the hint or the library (a CUDA string's own text is kept)."""
    import io
    import tokenize

    lines = source.splitlines()
    spans = [(node.lineno, node.end_lineno or node.lineno) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    for first, last in spans:
        for number in range(first, last + 1):
            lines[number - 1] = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                row, column = token.start
                lines[row - 1] = lines[row - 1][:column]
    except (tokenize.TokenError, IndentationError):  # parsed already: not expected
        pass
    return "\n".join(lines)


def l2_hints(source: str) -> list[str]:
    """`evict_last (line 12)` for each L2 eviction-priority hint in the source."""
    return [f"{found} (line {number})" for number, line in enumerate(source.splitlines(), 1)
            for found in dict.fromkeys(L2_HINTS.findall(line))]


def _check_forbidden(ctx: Context, tree: ast.Module) -> None:
    forbidden = set(ctx.problem.forbid)
    for name, line in qualified_uses(tree):
        if name in forbidden:
            raise RungFailed("ForbiddenName",
                             f"line {line} uses `{name}`, which the problem forbids",
                             "compute the core operation in your own kernel instead of "
                             "delegating it to torch or a vendor library",
                             location=f"{ctx.solution.path}:{line}")


def _check_shadowing(ctx: Context, tree: ast.Module) -> None:
    """A file beside the version (or the version itself) named after a standard or installed
    module the version imports: in the worker, `import triton` would find that file."""
    from krung.worker.explain import shadowing, shadowing_hint

    for module, line in imported_modules(tree):
        name = module.split(".")[0]
        local = shadowing(name, ctx.solution.path.parent)
        if local is not None:
            where = ("the version's own name" if local.resolve() == ctx.solution.path.resolve()
                     else f"{local.name} beside the version")
            raise RungFailed("ShadowedModule",
                             f"line {line} imports `{name}`, but {where} hides the real "
                             f"`{name}` (the version's folder comes first on the worker's "
                             "sys.path)",
                             shadowing_hint(name, local), location=f"{ctx.solution.path}:{line}")


def _problem_modules(ctx: Context) -> set[str]:
    """Module names a version could use to reach the problem's code (less the modules its
    format shares with versions, such as GPU MODE's task.py)."""
    path = ctx.problem.path
    names = {"problem", "reference"}
    if path.is_file():  # a KernelBench problem is one file
        names.add(path.stem)
    else:
        names.update(p.stem for p in path.glob("*.py"))
    return names - set(ctx.problem.shared_modules)
