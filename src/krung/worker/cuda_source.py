"""CUDA C++ inside a Python version: where its sources are, and where nvcc's errors point.

A version may hold CUDA source in a string (torch's `load_inline`, CuPy's `RawKernel` and
`RawModule`, cuda.core's `Program`) or name a `.cu` file. nvcc reports lines of the file it
compiled; krung maps them back to the line of the version's own `.py` file where that CUDA
line sits (the string's first line in the file, plus the line within it), so an error reads
`v2.py:31: error: identifier "idx" is undefined`.

`static_sources` finds the sources without running the version (a `load_inline` called
lazily inside a function is never reached by merely importing it): calls whose CUDA text is a
string literal or a module-level string constant. Stdlib only: runs in the worker, the judge
and the build process alike.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

# nvcc (cudafe/EDG) diagnostics: `file.cu(12): error: message`, also `error #20-D: message`.
_DIAGNOSTIC = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<severity>(?:catastrophic )?"
                         r"error|warning)(?: #[\w-]+)?: (?P<message>.*)$")
# gcc/clang style, as the host compiler reports: `file.cu:12:5: error: message`.
_HOST_DIAGNOSTIC = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+):(?:\d+:)? (?P<severity>(?:fatal )?"
                              r"error|warning): (?P<message>.*)$")

# krung's own prefix on a tool's output (krung.judge.rungs.artifacts.tools.ToolFailed).
_TOOL_PREFIX = re.compile(r"^\S+ [\d.?]+ exited with status \d+: ")

_CALLS = {  # call name -> (keyword, position) of its CUDA text, and where it comes from
    "load_inline": ("cuda_sources", 2, "load_inline"),
    "RawKernel": ("code", 0, "cupy.RawKernel"),
    "RawModule": ("code", 0, "cupy.RawModule"),
    "Program": ("code", 0, "cuda.core.Program"),
}


def source_line(text: str, code: str) -> int | None:
    """The line of `text` (a version's file) where `code` begins, if the code is there as
    written (a raw or plain triple-quoted string)."""
    if not code.strip():
        return None
    at = text.find(code)
    if at < 0:  # leading newline of r\"\"\"\n...: look for the first non-empty line instead
        stripped = code.lstrip("\n")
        at = text.find(stripped)
        if at < 0:
            return None
        return text.count("\n", 0, at) + 1 - (len(code) - len(stripped))
    return text.count("\n", 0, at) + 1


def segments(text: str, pieces: list[str]) -> list[list[int]]:
    """For sources joined from `pieces` with newlines: [first line in the joined code,
    line in the version's file] per piece found in the file."""
    found = []
    first = 1
    for piece in pieces:
        line = source_line(text, piece)
        if line is not None:
            found.append([first, line])
        first += piece.count("\n") + 1
    return found


def map_line(record: dict[str, Any], cu_line: int) -> tuple[str, int] | None:
    """The (file, line) in the version (or the .cu file it names) for line `cu_line` of
    the file krung gave nvcc."""
    line = cu_line - int(record.get("preamble_lines") or 0)
    if line < 1:
        return None
    if record.get("file"):  # a real .cu file: its own lines
        return record["file"], line
    best = None
    for first, py_line in record.get("segments") or []:
        if first <= line:
            best = (first, py_line)
    if best is None or not record.get("version"):
        return None
    return record["version"], best[1] + line - best[0]


def diagnostics(output: str, compiled: str) -> list[dict[str, Any]]:
    """nvcc's errors and warnings about `compiled` (the .cu file krung wrote), in order, with
    the source line and caret nvcc prints after each."""
    found: list[dict[str, Any]] = []
    lines = output.splitlines()
    for index, line in enumerate(lines):
        line = _TOOL_PREFIX.sub("", line.strip())
        match = _DIAGNOSTIC.match(line) or _HOST_DIAGNOSTIC.match(line)
        if not match:
            continue
        context = []
        for follow in lines[index + 1:index + 3]:
            if _DIAGNOSTIC.match(follow.strip()) or not follow.strip():
                break
            context.append(follow)
        found.append({"file": match["file"], "line": int(match["line"]),
                      "severity": match["severity"], "message": match["message"].strip(),
                      "ours": Path(match["file"]).name == Path(compiled).name,
                      "context": context})
    return found


def explain_failure(record: dict[str, Any], output: str, compiled: str) -> dict[str, Any]:
    """nvcc's failure as facts: the first error's message, its location in the version,
    and every error rewritten to the version's lines, each with its source line."""
    found = [d for d in diagnostics(output, compiled) if "error" in d["severity"]]
    if not found:
        return {"message": _last_line(output) or "nvcc failed", "location": None,
                "details": output[-4000:]}
    mapped = []
    location = None
    for diagnostic in found:
        where = map_line(record, diagnostic["line"]) if diagnostic["ours"] else None
        label = f"{where[0]}:{where[1]}" if where else f"{diagnostic['file']}:{diagnostic['line']}"
        if location is None and where:
            location = label
        mapped.append(f"{label}: {diagnostic['severity']}: {diagnostic['message']}")
        if where:
            mapped.append(f"{where[1]:5d} | {_file_line(where[0], where[1])}")
        else:
            mapped += [f"      {c}" for c in diagnostic["context"]]
    first = found[0]
    return {"message": first["message"], "location": location,
            "details": "\n".join(mapped)[-6000:], "errors": len(found)}


def static_sources(path: Path) -> list[dict[str, Any]]:
    """The CUDA sources a version names in literal form, without running it: the text given
    to load_inline / RawKernel / RawModule / Program (a literal, or a module-level string
    constant) and `.cu` files named in string literals that exist beside the version."""
    text = path.read_text(errors="replace")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    constants = _module_strings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name in _CALLS:
                source = _call_source(node, name, constants)
                if source is not None:
                    found.append(source)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                r"[\w./-]+\.cuh?", node.value):
            file = (path.parent / node.value).resolve()
            if file.is_file() and file.parent == path.parent.resolve():
                found.append({"name": file.stem, "code": file.read_text(errors="replace"),
                              "origin": file.name, "flags": [], "torch": False,
                              "file": str(file)})
    return found


def _call_source(node: ast.Call, name: str, constants: dict[str, Any]) -> dict[str, Any] | None:
    keyword, position, origin = _CALLS[name]
    value = next((k.value for k in node.keywords if k.arg == keyword), None)
    if value is None and len(node.args) > position:
        value = node.args[position]
    pieces = _strings(value, constants)
    if not pieces:
        return None
    label = _literal(next((k.value for k in node.keywords if k.arg == "name"), None)
                     or (node.args[0] if name == "load_inline" and node.args else None)
                     or (node.args[1] if name == "RawKernel" and len(node.args) > 1 else None),
                     constants)
    flag_key = "extra_cuda_cflags" if name == "load_inline" else "options"
    flags = _strings(next((k.value for k in node.keywords if k.arg == flag_key), None),
                     constants) or []
    headers = not any(k.arg == "no_implicit_headers" and _literal(k.value, constants)
                      for k in node.keywords)
    default = "raw_module" if name != "load_inline" else "cuda_source"
    return {"name": label if isinstance(label, str) else default, "code": "\n".join(pieces),
            "pieces": pieces, "origin": origin, "flags": flags,
            "torch": name == "load_inline" and headers}


def _module_strings(tree: ast.Module) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            value = _literal(node.value, values)
            if value is not None:
                values[node.targets[0].id] = value
    return values


def _literal(node: ast.AST | None, constants: dict[str, Any]) -> Any:
    if node is None:
        return None
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _strings(node: ast.AST | None, constants: dict[str, Any]) -> list[str] | None:
    value = _literal(node, constants)
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _call_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _file_line(path: str, line: int) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
