"""krung's own problem format: a directory with `problem.py`.

Loading checks the structure (functions, signatures, cases) and reports every defect at
once, each with its fix; the judge then checks the input generator's behaviour
(krung/judge/problem/behaviour.py).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from krung.judge import tolerance
from krung.judge.problem import PROBLEM_FILE, Problem
from krung.protocol.errors import ProblemError

Defects = list[tuple[str, str]]

# name -> (arguments a call must accept, the fix when it does not)
_FUNCTIONS = {
    "reference": (None, "define `def reference(*inputs)` returning a tensor or a tuple of tensors"),
    "make_inputs": (({"n": 1, "dtype": "float32"}, 0, "cpu"),
                    "define `def make_inputs(case: dict, seed: int, device: str) -> tuple`"),
    "flops": (({"n": 1, "dtype": "float32"},),
              "define `def flops(case: dict) -> int` (the minimum floating-point operations)"),
    "bytes_moved": (({"n": 1, "dtype": "float32"},),
                    "define `def bytes_moved(case: dict) -> int` (each input read once, each "
                    "output written once)"),
}
_DTYPES = {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
           "int64", "int32", "int16", "int8", "uint8", "bool"}


def import_file(path: Path, module_name: str) -> ModuleType:
    """Import one file as a fresh module, with its directory importable for its helpers."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def import_problem_file(file: Path, module_name: str, problem: Path) -> ModuleType:
    """Import a problem's file; its own errors become a ProblemError naming the line."""
    try:
        return import_file(file, module_name)
    except Exception as exc:  # the problem's own code raised: report where
        if isinstance(exc, SyntaxError):
            where = f"{exc.filename}:{exc.lineno}"
        else:
            frames = [f for f in traceback.extract_tb(exc.__traceback__)
                      if f.filename == str(file)] or traceback.extract_tb(exc.__traceback__)
            where = f"{frames[-1].filename}:{frames[-1].lineno}"
        fix = f"fix {where}"
        if isinstance(exc, ModuleNotFoundError) and exc.name:  # a package, not a bug
            fix = (f"install `{exc.name.split('.')[0]}` where krung runs ({sys.executable} -m "
                   f"pip install {exc.name.split('.')[0]}; the package's name may differ), "
                   f"or put the module beside the problem: {where} imports it")
        raise ProblemError(str(problem), [(
            f"{file.name} raised {type(exc).__name__}: {exc}", fix)]) from exc


def load_native(path: Path) -> Problem:
    module = import_problem_file(path / PROBLEM_FILE, f"krung_problem_{path.name}", path)
    defects = check_structure(module)
    if defects:
        raise ProblemError(str(path), defects)
    return Problem(
        name=path.name,
        path=path,
        reference=module.reference,
        make_inputs=module.make_inputs,
        test_cases=list(module.test_cases),
        bench_cases=list(module.bench_cases),
        cpu_bench_cases=list(getattr(module, "cpu_bench_cases", [])),
        flops=module.flops,
        bytes_moved=module.bytes_moved,
        tolerance=getattr(module, "tolerance", None),
        description=str(getattr(module, "description", "") or (module.__doc__ or "")).strip(),
        forbid=list(getattr(module, "forbid", [])),
        forbid_ops=list(getattr(module, "forbid_ops", [])),
        require_own_kernel=bool(getattr(module, "require_own_kernel", False)),
        inplace=bool(getattr(module, "inplace", False)),
        change_timed_inputs=bool(getattr(module, "change_timed_inputs", True)),
        value_stress=bool(getattr(module, "value_stress", True)),
        derive_case=getattr(module, "derive_case", None),
    )


def check_structure(module: ModuleType) -> Defects:
    defects: Defects = []
    for name, (args, fix) in _FUNCTIONS.items():
        fn = getattr(module, name, None)
        if not callable(fn):
            defects.append((f"`{name}` is missing", fix))
        elif args is not None and not _accepts(fn, args):
            defects.append((f"`{name}{_signature(fn)}` cannot be called as `{name}"
                            f"({', '.join(repr(a) for a in args)})`", fix))
    for attr in ("test_cases", "bench_cases", "cpu_bench_cases"):
        required = attr != "cpu_bench_cases"
        cases = getattr(module, attr, None)
        if cases is None and not required:
            continue
        defects += _check_cases(attr, cases)
    test_cases = [c for c in getattr(module, "test_cases", None) or [] if isinstance(c, dict)]
    sizes = [v for c in test_cases for v in c.values()
             if isinstance(v, int) and not isinstance(v, bool)]
    if sizes and all(v > 0 and v & (v - 1) == 0 for v in sizes):
        defects.append(("every size in test_cases is a power of two, where tail bugs never show",
                        "add awkward sizes that are not powers of two (17, 1000, a prime), "
                        "besides a tiny case and a large one"))
    dtypes = {c.get("dtype") for c in test_cases}
    for message in tolerance.check_override(getattr(module, "tolerance", None),
                                            {d for d in dtypes if isinstance(d, str)}):
        defects.append((message, "see krung.judge.tolerance for the policy names and fields"))
    return defects


def _check_cases(attr: str, cases: Any) -> Defects:
    example = '[{"rows": 127, "cols": 1000, "dtype": "float32"}, ...]'
    if not isinstance(cases, (list, tuple)) or not cases:
        return [(f"`{attr}` is missing or empty", f"define `{attr} = {example}`")]
    defects: Defects = []
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            defects.append((f"{attr}[{i}] is a {type(case).__name__}, not a dict",
                            f"write each case as a dict, e.g. {example}"))
        elif "dtype" not in case:
            defects.append((f"{attr}[{i}] = {case} has no dtype",
                            'add "dtype": "float32" (or another torch dtype name) to it'))
        elif case["dtype"] not in _DTYPES:
            defects.append((f"{attr}[{i}] has dtype {case['dtype']!r}, not a torch dtype name",
                            f"use one of {sorted(_DTYPES)}"))
    return defects


def _accepts(fn: Any, args: tuple) -> bool:
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        return False
    except ValueError:  # builtins without a signature: let the call tell
        return True
    return True


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except ValueError:
        return "(...)"
