"""Problems: what must be computed, how to make inputs, and how much work that is.

Three formats, one model (`Problem`), so the ladder runs the same over each:

- native: a directory holding `problem.py` (krung's own, see native.py);
- KernelBench: one `.py` file with `class Model(nn.Module)`, `get_inputs()` and
  `get_init_inputs()` (kernelbench.py);
- GPU MODE reference-kernels: a directory holding `reference.py` and `task.yml` (gpumode.py).

`find_problem` turns what a user typed (a path, or a built-in name) into a path and
`detect_format` names its format, both by looking at files, never importing them (the caller
never imports torch or a problem); `load_problem` imports and validates it (in the judge).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krung.protocol.errors import UsageError

PROBLEM_FILE = "problem.py"
NATIVE, KERNELBENCH, GPUMODE = "native", "kernelbench", "gpumode"
GPUMODE_FILES = ("reference.py", "task.yml")
KERNELBENCH_NAMES = ("class Model", "def get_inputs", "def get_init_inputs")
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # KernelBench's names


@dataclass
class Problem:
    name: str
    path: Path
    reference: Callable[..., Any]
    make_inputs: Callable[[dict, int, str], tuple]
    test_cases: list[dict]
    bench_cases: list[dict]
    flops: Callable[[dict], int]
    bytes_moved: Callable[[dict], int]
    cpu_bench_cases: list[dict] = field(default_factory=list)
    tolerance: Any = None
    description: str = ""
    format: str = NATIVE
    # Trust policy (see krung/contract.py): Python names the version must not use (`static`
    # rung), torch operators it must not run (traced at run time), whether it must launch a
    # kernel of its own (krung.judge.problem.policy: also from a sidecar and the options),
    # and whether it may write its inputs.
    forbid: list[str] = field(default_factory=list)
    forbid_ops: list[str] = field(default_factory=list)
    require_own_kernel: bool = False
    inplace: bool = False
    change_timed_inputs: bool = True  # False: the inputs' structure forbids (docs/timing.md)
    value_stress: bool = True  # False: only the generator's values are meaningful (docs/trust.md)
    derive_case: Callable[..., dict | None] | None = None
    # What the version defines and how the worker takes it (krung/entries.py).
    entry: dict[str, Any] = field(default_factory=lambda: {"kind": "function", "name": "kernel"})
    entry_doc: str = ""  # the entry point in words, for agents (describe)
    reference_code: Any = None  # what to show as the reference's source (a class, a function)
    # Modules beside the problem a version may import (GPU MODE's task.py and utils.py).
    shared_modules: list[str] = field(default_factory=list)
    # The problem's own verdict, run in the judge: check(inputs, output) -> (ok, message).
    check: Callable[[tuple, Any], tuple[bool, str]] | None = None
    # False: the problem's own check decides closeness, and krung's per-dtype tolerance only
    # reports its metrics (NaN/Inf where the reference is finite still fails).
    tolerance_decides: bool = True
    # Which leaves of these inputs (tree.leaves order) are output buffers the version may
    # write; they are poisoned before each checked call and exempt from the unchanged check.
    writable: Callable[[tuple], set[int]] | None = None
    setup: Callable[[int, str], None] | None = None  # (secret-derived seed, device), in the judge
    ranking_by: str | None = None  # GPU MODE: how bench cases make one score (last, mean, geom)
    timeouts: dict[str, float] = field(default_factory=dict)  # caps on krung's settings
    facts: dict[str, Any] = field(default_factory=dict)  # recorded with the run (env)
    _cpu: Any = field(default=None, init=False, repr=False, compare=False)  # CpuCases, once

    @property
    def check_decides_outputs(self) -> bool:
        """The problem's own check decides which outputs it accepts (GPU MODE's: another
        dtype may pass it); krung's output contract then asks only what the check cannot
        see."""
        return self.check is not None and not self.tolerance_decides

    def writable_leaves(self, inputs: tuple) -> set[int]:
        """The output buffers among these inputs (none unless the format passes some)."""
        return self.writable(inputs) if self.writable else set()

    def bench_cases_for(self, device: str) -> list[dict]:
        """Bench cases sized for the device: the interpreter on a CPU needs small ones, the
        problem's `cpu_bench_cases` or its smallest bench case shrunk (cpu_cases.py)."""
        if device == "cpu":
            return list(self._cpu_cases().cases)
        return self.bench_cases

    def cpu_reduction(self) -> dict[str, Any] | None:
        """What the CPU times instead of the smallest bench case, when that is too big for
        the interpreter: {"from", "to", "how", "bytes", "budget_bytes"}; None otherwise."""
        return self._cpu_cases().reduced

    def _cpu_cases(self) -> Any:
        if self._cpu is None:  # made once: it may run the generator and the reference
            from krung.judge.problem.cpu_cases import cpu_cases

            self._cpu = cpu_cases(self)
        return self._cpu


def case_label(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


def case_size(case: dict) -> int:
    """The product of a case's integer sizes: a rough measure of how much work it is."""
    size = 1
    for value in case.values():
        if isinstance(value, int) and not isinstance(value, bool):
            size *= max(value, 1)
    return size


def builtin_dir() -> Path:
    """Where the built-in problems are: in the installed package, or in the source tree."""
    here = Path(__file__).resolve().parents[2]  # the krung package
    packaged = here / "builtin_problems"
    return packaged if packaged.is_dir() else here.parent.parent / "problems"


def builtin_problems() -> list[tuple[str, str]]:
    """(name, description) of each built-in problem, read without importing anything."""
    root = builtin_dir()
    found = []
    for path in sorted(root.glob(f"*/{PROBLEM_FILE}")):
        found.append((path.parent.name, read_description(path)))
    return found


def read_description(problem_file: Path) -> str:
    """The problem's `description` (or its docstring), by parsing, not importing."""
    try:
        tree = ast.parse(problem_file.read_text(), filename=str(problem_file))
    except (OSError, SyntaxError):
        return ""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "description" for t in node.targets)):
            return str(node.value.value).strip()
    doc = (ast.get_docstring(tree) or "").strip()
    return doc.split("\n")[0]


_LOOKED_FOR = (f"krung's format: a directory holding {PROBLEM_FILE}; GPU MODE: a directory "
               f"holding {' and '.join(GPUMODE_FILES)}; KernelBench: a .py file defining "
               f"{', '.join(f'`{n}`' for n in KERNELBENCH_NAMES)} at module level")


def find_problem(spec: str | Path) -> Path:
    """The problem's path (a directory, or a KernelBench file) for a path or a built-in name.
    Raises UsageError naming what was looked for when the path is in no known format."""
    path = Path(spec)
    if path.is_file():
        if path.name == PROBLEM_FILE or path.name in GPUMODE_FILES:
            return find_problem(path.parent)
        missing = kernelbench_missing(path)
        if not missing:
            return path.resolve()
        raise UsageError(f"{path} is not a problem: it is not a KernelBench problem file "
                         f"(no {', '.join(f'`{m}`' for m in missing)} at module level)",
                         hint=f"give a problem in one of the formats krung reads: {_LOOKED_FOR}")
    if path.is_dir():
        if (path / PROBLEM_FILE).is_file():
            return path.resolve()
        if all((path / name).is_file() for name in GPUMODE_FILES):
            return path.resolve()
        present = [name for name in GPUMODE_FILES if (path / name).is_file()]
        found = f" (it has {present[0]} but not the other)" if present else ""
        raise UsageError(f"{path} is not a problem directory{found}",
                         hint=f"looked for {_LOOKED_FOR}; `krung new NAME` scaffolds a "
                              "problem in krung's format")
    builtin = builtin_dir() / str(spec)
    if (builtin / PROBLEM_FILE).is_file():
        return builtin.resolve()
    names = ", ".join(name for name, _ in builtin_problems())
    raise UsageError(f"no problem at {spec!r}: not a file or directory, and not a built-in "
                     "problem",
                     hint=f"give a problem directory, or one of the built-in problems: {names} "
                          f"(krung reads {_LOOKED_FOR})")


def detect_format(path: Path) -> str:
    """The format of a path `find_problem` returned, by its files alone."""
    if path.is_file():
        return KERNELBENCH
    if (path / PROBLEM_FILE).is_file():
        return NATIVE
    return GPUMODE


SCALE_MARK = "scale"  # `1_ReLU@scale0.1`: a run at a tenth of the declared sizes


def problem_name(path: Path, precision: str | None = None, scale: float = 1.0) -> str:
    """How runs name a problem: its directory's name, or a KernelBench file's stem; a
    KernelBench precision other than fp32 is part of the name (`1_ReLU@bf16`), and so is a
    scale other than 1 (`1_ReLU@scale0.1`), so runs at each precision and size keep their
    own history, parents and best. (The store tells problems of one name apart by their
    path: krung.host.store.)"""
    name = path.stem if path.is_file() else path.name
    if precision and precision != "fp32":
        name += f"@{precision}"
    if scale != 1:
        name += f"@{SCALE_MARK}{scale:g}"
    return name


def history_name(spec: str) -> str:
    """The problem runs of `spec` are recorded under, as the store looks it up: a problem's
    path gives its name and its path (`vectoradd_py (/work/pmpp_v2/vectoradd_py)`), and
    `PATH@bf16`, `PATH@scale0.1` add the precision and scale; anything else is taken as a
    name (`1_ReLU@bf16`), which the store resolves when one problem has it."""
    base, qualifiers = spec, []
    while not Path(base).exists() and "@" in base:
        base, _, qualifier = base.rpartition("@")
        qualifiers.insert(0, qualifier)
    path = Path(base)
    if not (path.is_dir() or path.is_file()):
        return spec
    precision, scale = None, 1.0
    for qualifier in qualifiers:
        if qualifier.startswith(SCALE_MARK):
            try:
                scale = float(qualifier.removeprefix(SCALE_MARK))
            except ValueError:
                return spec
        else:
            precision = qualifier
    resolved = path.resolve()
    return identity(problem_name(resolved, precision, scale), str(resolved))


def identity(name: str, path: str) -> str:
    """One problem's key in the store: its name and the path it was run from."""
    return f"{name} ({path})"


def parse_identity(key: str) -> tuple[str, str | None]:
    """(name, path) from `identity`'s form, (name, None) from a bare name."""
    if key.endswith(")") and " (" in key:
        name, _, path = key[:-1].partition(" (")
        return name, path
    return key, None


def kernelbench_missing(path: Path) -> list[str]:
    """Which of KernelBench's module-level definitions a .py file lacks (all of them when it
    is not Python at all); parsed, never imported."""
    if path.suffix != ".py":
        return list(KERNELBENCH_NAMES)
    try:
        tree = ast.parse(path.read_text(errors="replace"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return list(KERNELBENCH_NAMES)
    defined = {f"class {n.name}" for n in tree.body if isinstance(n, ast.ClassDef)}
    defined |= {f"def {n.name}" for n in tree.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return [name for name in KERNELBENCH_NAMES if name not in defined]


def precision_dtype(precision: str | None) -> str | None:
    """The torch dtype name for a KernelBench precision (fp32, fp16, bf16)."""
    if precision is None:
        return None
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r} is not one krung knows",
                         hint=f"use one of: {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


def load_problem(path: Path, precision: str | None = None, scale: float = 1.0,
                 policy: Any = None, inputs_on_device: bool = False) -> Problem:
    """Import and validate a problem in its format, at `scale` times its declared sizes
    (krung.judge.problem.scale), with the delegation policy of its sidecar and `policy` (a
    krung.judge.problem.policy.Policy: the run's options) added to its own; raises
    ProblemError listing every defect, UsageError when `precision` is given for a format
    that does not take one. `inputs_on_device`: KernelBench's get_inputs() drawn on the GPU
    (KRUNG_INPUTS_ON_DEVICE)."""
    from krung.judge.problem.policy import apply_policy, read_sidecar

    kind = detect_format(path)
    if precision is not None and kind != KERNELBENCH:
        raise UsageError(f"--precision applies to KernelBench problems; {path} is in "
                         f"{kind} format, whose cases name their own dtypes",
                         hint="drop --precision")
    sidecar = read_sidecar(path)  # a broken sidecar is reported before the problem runs
    if kind == KERNELBENCH:
        from krung.judge.problem.kernelbench import load_kernelbench

        problem = load_kernelbench(path, precision or "fp32", scale, inputs_on_device)
    elif kind == GPUMODE:
        from krung.judge.problem.gpumode import load_gpumode

        problem = load_gpumode(path)
    else:
        from krung.judge.problem.native import load_native

        problem = load_native(path)
    if scale != 1 and kind != KERNELBENCH:  # KernelBench scales its constants as it loads
        from krung.judge.problem.scale import scale_problem_cases

        scale_problem_cases(problem, scale)
    apply_policy(problem, sidecar)
    if policy is not None:
        apply_policy(problem, policy)
    return problem
