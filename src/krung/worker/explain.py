"""Turn an exception raised by a version into facts an agent can act on.

The answer names the line in the version's own file (not krung's, not Triton's), shows it
with a caret, says whether it is a compile or a run-time error, and adds a hint when the
error is one we know. Runs inside the candidate worker: stdlib only.
"""

from __future__ import annotations

import importlib.machinery
import linecache
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

# (text found in the error, hint). First match wins; keep the most specific first.
HINTS: list[tuple[str, str]] = [
    ("arange's range must be a power of 2",
     "tl.arange needs a power-of-two length: round the block up with "
     "triton.next_power_of_2(n) and mask the tail"),
    ("out of resource: shared memory",
     "the tiles need more shared memory than the SM has: use smaller BLOCK sizes or fewer "
     "num_stages"),
    ("an illegal memory access was encountered",
     "a load or store went out of bounds: check the masks and the pointer arithmetic; the CUDA "
     "context is now unusable, so later calls in this process fail too"),
    ("misaligned address",
     "a vector load or store is not aligned: check the pointer offsets and the dtype sizes"),
    ("CUDA out of memory",
     "the version allocates more GPU memory than is free: allocate outputs once, free "
     "temporaries, or work in chunks"),
    ("Pointer argument cannot be accessed from Triton (cpu tensor?)",
     "a tensor passed to the kernel is on the CPU: create outputs on the inputs' device"),
    ("must be a CUDA tensor", "create outputs on the inputs' device (device=x.device)"),
    ("File too large",
     "the version wrote more than KRUNG_MAX_FILE_BYTES to one file (a print flood?); print "
     "less, or raise the limit"),
    ("No module named 'triton'", "install Triton: pip install triton"),
    ("No module named 'cupy'", "install CuPy: pip install cupy-cuda12x (or cupy-cuda13x)"),
    ("No module named 'cutlass'", "install CuTeDSL: pip install nvidia-cutlass-dsl"),
    ("No module named 'tilelang'", "install TileLang: pip install tilelang"),
    ("No module named 'numba'", "install numba-cuda: pip install numba-cuda"),
]

# Under Triton's interpreter only (CPU runs): constructs it does not implement.
INTERPRETER_HINTS: list[tuple[str, str]] = [
    ("has no numpy counterpart in krung's interpreter patch",
     "krung runs libdevice's math functions under Triton's interpreter, not this one: on a "
     "CPU use tl.math's functions (tl.exp, tl.log, tl.sqrt, tl.sigmoid) or plain "
     "arithmetic for it, or evaluate the version on a GPU"),
]

COMPILE_ERRORS = {"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct",
                  "SyntaxError", "IndentationError", "TabError", "NVRTCError",
                  "CompileException", "CudaCompileError"}


def hint_for(text: str) -> str | None:
    table = HINTS
    if os.environ.get("TRITON_INTERPRET") == "1":
        table = INTERPRETER_HINTS + HINTS
    return next((hint for needle, hint in table if needle in text), None)


def shadowing(name: str, folder: Path) -> Path | None:
    """The file in `folder` that hides the standard or installed module `name`, if any.

    The worker puts the version's folder first on sys.path (so a version can import files
    beside it); a `triton.py` there (or the version itself named so) is then what
    `import triton` finds, and the import fails far from the cause ("'triton' is not a
    package"). The static rung asks this before anything runs; `explain` after a failure."""
    local = next((p for p in (folder / f"{name}.py", folder / name / "__init__.py")
                  if p.is_file()), None)
    if local is None or name in sys.builtin_module_names:  # a builtin is never shadowed
        return None
    folder = folder.resolve()
    elsewhere = [p for p in sys.path if p and Path(p).resolve() != folder]
    if name in sys.stdlib_module_names or \
            importlib.machinery.PathFinder.find_spec(name, elsewhere) is not None:
        return local
    return None


def shadowing_hint(name: str, local: Path) -> str:
    return (f"{local} has the name of the module `{name}`, so `import {name}` finds it "
            f"instead: rename it (e.g. to my_{name}.py; a version is best named v1.py, "
            "v2.py, ...)")


def _shadow_hint(chain: list[BaseException], solution: Path) -> str | None:
    """A hint naming the file beside the version that hides a module the error mentions."""
    for exc in chain:
        if isinstance(exc, (ImportError, AttributeError)):
            for name in re.findall(r"'([A-Za-z_]\w*)", str(exc)):
                local = shadowing(name, solution.parent)
                if local is not None:
                    return shadowing_hint(name, local)
    return None


def explain(exc: BaseException, solution: Path, stage: str) -> dict[str, Any]:
    """A JSON-ready description of `exc` raised while `stage` ("load" or "call") ran."""
    chain = _chain(exc)
    compile_error = next((e for e in chain if type(e).__name__ in COMPILE_ERRORS), None)
    if compile_error is not None and hasattr(compile_error, "krung_location"):
        info = {"type": type(compile_error).__name__, "message": str(compile_error),  # nvcc's,
                "location": compile_error.krung_location,  # mapped to the version's lines
                "details": compile_error.krung_details}
    elif compile_error is not None and type(compile_error).__name__.startswith("Compil"):
        info = _triton_compile_error(compile_error, solution)
    elif isinstance(compile_error, SyntaxError):
        info = _syntax_error(compile_error)
    else:
        culprit = _innermost_with_frame_in(chain, solution) or exc
        info = _runtime_error(culprit, solution)
        if compile_error is not None:
            info["type"] = type(compile_error).__name__
    kind = "compile" if compile_error is not None else ("load" if stage == "load" else "runtime")
    text = f"{info['type']}: {info['message']}\n{info.get('details') or ''}"
    if isinstance(exc, SystemExit):
        info["message"] = f"the version called sys.exit({exc.code!r})"
        info["hint"] = "a version must return its outputs, never exit the process"
    else:
        info["hint"] = _shadow_hint(chain, solution) or hint_for(text)
    info["kind"] = kind
    return info


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _innermost_with_frame_in(chain: list[BaseException], solution: Path) -> BaseException | None:
    for exc in reversed(chain):  # the root cause first
        if _frames_in(exc, solution):
            return exc
    return None


def _frames_in(exc: BaseException, solution: Path) -> list[traceback.FrameSummary]:
    target = str(solution)
    return [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == target]


def _first_line(message: str) -> str:
    lines = [line for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _runtime_error(exc: BaseException, solution: Path) -> dict[str, Any]:
    frames = _frames_in(exc, solution)
    message = str(exc).strip() or repr(exc)
    info: dict[str, Any] = {"type": type(exc).__name__, "message": _first_line(message),
                            "location": None}
    tail = _trimmed_traceback(exc, solution)
    if frames:
        frame = frames[-1]
        info["location"] = f"{frame.filename}:{frame.lineno}"
        excerpt = _excerpt(frame.filename, frame.lineno or 0, getattr(frame, "colno", None),
                           getattr(frame, "end_colno", None))
        info["details"] = f"{excerpt}\n\n{tail}" if excerpt else tail
    else:
        info["details"] = tail
    if len(message.splitlines()) > 1:
        info["details"] = f"{message}\n\n{info['details']}"
    return info


def _trimmed_traceback(exc: BaseException, solution: Path) -> str:
    """The version's own frames and the last few library frames below them: no worker frames."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [i for i, f in enumerate(frames) if f.filename == str(solution)]
    if mine:
        frames = traceback.StackSummary.from_list(
            frames[mine[0]:mine[-1] + 1] + frames[mine[-1] + 1:][-3:])
    else:
        frames = traceback.StackSummary.from_list(frames[-6:])
    lines = ["Traceback (most recent call last):\n", *frames.format(),
             *traceback.format_exception_only(type(exc), exc)]
    return "".join(lines).rstrip()


def _syntax_error(exc: SyntaxError) -> dict[str, Any]:
    location = f"{exc.filename}:{exc.lineno}" if exc.filename else None
    excerpt = _excerpt(exc.filename or "", exc.lineno or 0, exc.offset and exc.offset - 1, None)
    return {"type": type(exc).__name__, "message": exc.msg, "location": location,
            "details": excerpt}


def _triton_compile_error(exc: BaseException, solution: Path) -> dict[str, Any]:
    """Triton reports lines relative to the @jit function; map them to the version's file."""
    src: str = getattr(exc, "src", None) or ""
    node = getattr(exc, "node", None)
    message, inner = _compile_error_message(exc)
    relative = getattr(node, "lineno", None)
    location = None
    if src and relative:
        def_line = src.lstrip("\n").split("\n", 1)[0].strip()
        try:
            lines = solution.read_text().splitlines()
        except OSError:
            lines = []
        starts = [i + 1 for i, line in enumerate(lines) if line.strip() == def_line]
        if starts:
            location = f"{solution}:{starts[0] + relative - 1}"
    details = "\n\n".join(str(e).strip() for e in [exc, *inner])
    return {"type": type(exc).__name__,
            "message": _first_line(message) or "Triton could not compile the kernel",
            "location": location, "details": details}


def _compile_error_message(exc: BaseException) -> tuple[str, list[BaseException]]:
    """Triton's reason, and the compile errors it wraps: a kernel's error at a call into
    triton.language (tl.sigmoid on bf16) wraps the callee's, whose own text is only
    "at 2:20:"; the reason is the innermost one that says one, or the error it wraps."""
    chain = [exc]
    while ((cause := chain[-1].__cause__) is not None and cause not in chain
           and type(cause).__name__.startswith("Compil")):
        chain.append(cause)
    said = [m for e in chain if (m := (getattr(e, "error_message", None) or "").strip())]
    if said:
        return said[-1], chain[1:]
    cause = chain[-1].__cause__
    return (f"{type(cause).__name__}: {cause}" if cause is not None else ""), chain[1:]


def _excerpt(filename: str, lineno: int, col: int | None, end_col: int | None) -> str:
    """The failing line with the two before it and a caret under the failing part."""
    if not filename or lineno <= 0:
        return ""
    lines = []
    for number in range(max(1, lineno - 2), lineno + 1):
        text = linecache.getline(filename, number).rstrip("\n")
        lines.append(f"{number:5d} | {text}")
    if col is not None:
        width = max(1, (end_col or col + 1) - col)
        lines.append(" " * 8 + " " * col + "^" * width)
    return "\n".join(lines)
