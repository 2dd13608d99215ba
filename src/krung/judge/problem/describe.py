"""What a problem asks for, as data an agent can write a version from.

Runs as `python -m krung.judge.problem.describe PATH`, started by `catalog.describe_problem` so that
the caller never imports torch or the problem: it loads and validates the problem, runs its
generator and reference once on the smallest test case (on the CPU) to show the inputs' and
outputs' shapes and dtypes, and prints one JSON object.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from krung.judge import tolerance
from krung.judge.problem import PROBLEM_FILE, Problem, case_label, case_size
from krung.judge.solution import ENTRY_POINT
from krung.protocol.errors import KrungError, ProblemError
from krung.protocol.tree import json_safe

# Where each format keeps the problem's definition, relative to its path.
_PROBLEM_FILES = {"native": PROBLEM_FILE, "gpumode": "reference.py", "kernelbench": ""}

RULE = ("an element passes when |out - ref| <= atol + rtol * |ref|, compared in float64; "
        "reduced precisions must also reach min_psnr_db and min_cossim over the whole output; "
        "NaN or Inf where the reference is finite never passes; integer outputs must be exact")


def describe(problem: Problem) -> dict[str, Any]:
    """The description itself; runs where the problem is imported (the child process)."""
    warnings: list[str] = []
    code = problem.reference_code or problem.reference
    params = [n for n in _parameters(getattr(code, "forward", code)) if n != "self"]
    example = _example(problem, warnings)
    dtypes = sorted({c["dtype"] for c in problem.test_cases + problem.bench_cases if "dtype" in c}
                    | {o["dtype"] for o in example.get("outputs", [])})
    return json_safe({
        "name": problem.name,
        "path": str(problem.path),
        "format": problem.format,
        "problem_file": str(problem.path / _PROBLEM_FILES.get(problem.format, PROBLEM_FILE)),
        "description": problem.description,
        "reference": {"signature": f"{getattr(code, '__name__', 'reference')}"
                                   f"{_signature(code)}",
                      "parameters": params, "source": _source(code)},
        "entry_point": problem.entry_doc or (
            f"a version is one .py file defining `def {ENTRY_POINT}("
            f"{', '.join(params)})` that takes the reference's inputs in the same "
            "order and returns its own output tensor(s), same count, dtype, shape "
            "and device as the reference's; it must not import the problem"),
        "example": example,
        "test_cases": [_case(problem, c, warnings) for c in problem.test_cases],
        "bench_cases": [_case(problem, c, warnings) for c in problem.bench_cases],
        "cpu_bench_cases": [_case(problem, c, warnings)
                            for c in problem.bench_cases_for("cpu")],
        "tolerance": {
            "rule": RULE if problem.tolerance_decides else (
                "the problem's own check decides (it runs in the judge on every output); "
                "krung's metrics under the policy below are reported beside it, and NaN or "
                "Inf where the reference is finite never passes"),
            "override": problem.tolerance,
            "by_dtype": {d: tolerance.resolve(d, problem.tolerance).to_json() for d in dtypes},
        },
        **({"ranking_by": problem.ranking_by} if problem.ranking_by else {}),
        "warnings": warnings,
    })


def _case(problem: Problem, case: dict, warnings: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"label": case_label(case), "case": dict(case)}
    for key, fn in (("flops", problem.flops), ("bytes_moved", problem.bytes_moved)):
        try:
            row[key] = int(fn(dict(case)))
        except Exception as exc:  # the problem's own code: report it, describe the rest
            row[key] = None
            warnings.append(f"{key}({case}) raised {type(exc).__name__}: {exc}")
    if row["flops"] is not None and row["bytes_moved"]:
        row["flops_per_byte"] = round(row["flops"] / row["bytes_moved"], 4)
    return row


def _example(problem: Problem, warnings: list[str]) -> dict[str, Any]:
    """Inputs and outputs of the smallest test case, made on the CPU: their specs only."""
    from krung.protocol.channel import tensor_spec
    from krung.protocol.tree import clone

    case = min(problem.test_cases, key=case_size)
    try:
        inputs = tuple(problem.make_inputs(dict(case), 0, "cpu"))
        outputs = problem.reference(*clone(inputs))
    except Exception as exc:
        warnings.append(f"make_inputs or reference on {case} raised {type(exc).__name__}: {exc}")
        return {"case": case_label(case)}
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    code = problem.reference_code or problem.reference
    names = [n for n in _parameters(getattr(code, "forward", code)) if n != "self"]
    specs = []
    for i, tensor in enumerate(inputs):
        spec = {"name": names[i] if i < len(names) else f"input{i}", **_spec(tensor, tensor_spec)}
        specs.append(spec)
    return {"case": case_label(case), "inputs": specs,
            "outputs": [_spec(t, tensor_spec) for t in outputs],
            "returns": "tuple" if len(outputs) > 1 else "tensor"}


def _spec(value: Any, tensor_spec: Any) -> dict[str, Any]:
    """A tensor's dtype, shape and stride; a structure's items, each described; a plain
    value's type and value."""
    if isinstance(value, (tuple, list)):
        return {"type": type(value).__name__, "items": [_spec(v, tensor_spec) for v in value]}
    if isinstance(value, dict):
        return {"type": "dict", "items": {str(k): _spec(v, tensor_spec) for k, v in value.items()}}
    try:
        spec = tensor_spec(value)
    except AttributeError:  # not a tensor
        return {"type": type(value).__name__, "value": repr(value)[:80]}
    return {k: spec[k] for k in ("dtype", "shape", "stride")}


def _parameters(fn: Any) -> list[str]:
    try:
        return [p.name if p.kind is not p.VAR_POSITIONAL else f"*{p.name}"
                for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return []


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _source(fn: Any) -> str | None:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def main(argv: list[str] | None = None) -> None:
    from krung.judge.problem import load_problem
    from krung.judge.problem.behaviour import check_behaviour

    args = sys.argv[1:] if argv is None else argv
    # Our stdout carries the answer; whatever the problem prints goes to stderr.
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        problem = load_problem(Path(args[0]))
        if problem.setup is not None:
            problem.setup(0, "cpu")
        check_behaviour(problem, "cpu")
        answer = describe(problem)
    except ProblemError as exc:
        answer = {"error": {"message": exc.message, "hint": exc.hint,
                            "defects": [list(d) for d in exc.defects]}}
    except KrungError as exc:
        answer = {"error": {"message": exc.message, "hint": exc.hint}}
    except Exception as exc:
        traceback.print_exc()
        answer = {"error": {"message": f"describing {args[0]} failed: "
                                       f"{type(exc).__name__}: {exc}",
                            "hint": "the traceback is above; this is a krung bug unless it "
                                    "points into the problem's code"}}
    with os.fdopen(answer_fd, "w") as out:
        out.write(json.dumps(answer, allow_nan=False))
    sys.stderr.flush()
    os._exit(0)  # skip torch's slow tear-down


if __name__ == "__main__":
    main()
