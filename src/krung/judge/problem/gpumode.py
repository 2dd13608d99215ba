"""GPU MODE reference-kernels problems, run as they are: a directory holding `reference.py`
(`generate_input(**case)`, `ref_kernel(data)`, `check_implementation(data, output)`) and
`task.yml` (`tests` and `benchmarks` as lists of keyword dicts, timeouts, `ranking_by`),
often `task.py` and `utils.py` (or, as in their repository, files that task.yml's `files`
list brings from elsewhere, such as `../utils.py`). A version is a `submission.py`-like file
defining `custom_kernel(data)`.

What krung adds to GPU MODE's own evaluation:

- the `seed` of every case is replaced with one derived from the evaluation's secret seed,
  so a version never sees the inputs of a declared seed;
- `check_implementation` runs in the judge, on a copy of the data as it was made, never in
  the version's process; it decides closeness (its tolerance is the problem's), and krung's
  metrics are reported beside it;
- output buffers handed in with the data (the `torch.empty` outputs of a tuple such as
  `(a, b, c)`) are found by running the reference on a copy and seeing which tensors it
  wrote, or, where it returns new tensors instead (pmpp's prefixsum), which tensors of an
  output's size it ignores (poisoned, its answer keeps every bit); they are poisoned before
  every checked call (an element the version does not write shows as NaN), and every other
  tensor of the data must come back unchanged;
- the problem's own check decides which outputs it accepts: GPU MODE's submissions may
  return another dtype (float32 written into a float32 buffer where the reference returns
  float64), and krung's contract adds only what the check cannot see (a plain tensor, on
  the device, as many outputs as the reference's);
- unseen cases move every size that varies among the declared cases to an awkward neighbour
  (odd, a prime where one is near: never a multiple of a tile size, even where every listed
  size is a multiple of 64, so a version that skips the tail fails), and leave alone keys that
  never vary; a problem whose sizes must be multiples of something says so in task.yml
  (`size_multiples: {k: 128}`, krung's own key), and those sizes move to other multiples;
- the timing protocol is krung's (krung/timing.py), and the bench cases' medians are ranked
  as `ranking_by` says (`last`, `mean` or `geom`);
- `test_timeout` and `benchmark_timeout` cap krung's per-call and per-bench-case limits.
"""

from __future__ import annotations

import inspect
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from krung.judge.problem import GPUMODE, Problem, case_label
from krung.judge.problem.native import import_problem_file
from krung.judge.problem.unseen import granular_neighbour
from krung.protocol import tree
from krung.protocol.errors import ProblemError, UsageError

TASK_FILE = "task.yml"
REFERENCE_FILE = "reference.py"
ENTRY_FUNCTION = "custom_kernel"
RANKINGS = ("last", "mean", "geom")
PRIVATE = {"reference.py", "eval.py", "submission.py"}  # not for the version to import
SEED_MODULUS = 2_147_483_647  # generate_input may hand the seed to numpy, which takes < 2**32
ENTRY_DOC = ("a version is one .py file defining `def custom_kernel(data)` that takes the data "
             "object generate_input makes (a tensor, or a tuple or dict holding tensors) and "
             "returns the output as ref_kernel does, writing into the output buffer the data "
             "carries where it carries one; it may import task.py and utils.py, not reference.py")
_TIMEOUTS = {"test_timeout": "call_timeout_s", "benchmark_timeout": "bench_timeout_s"}


def load_gpumode(path: Path) -> Problem:
    task = read_task(path)
    support = support_dirs(path, task)
    for folder in reversed(support):  # the judge's own process: reference.py's imports
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    module = import_problem_file(path / REFERENCE_FILE, f"krung_gpumode_{path.name}", path)
    defects = [(f"reference.py defines no `{name}`", fix) for name, fix in (
        ("generate_input", "define `def generate_input(**case)` that builds the data from "
                           "the case's sizes and its `seed`"),
        ("ref_kernel", "define `def ref_kernel(data)` returning the output"),
        ("check_implementation", "define `def check_implementation(data, output)` returning "
                                 "a bool or (bool, message)"),
    ) if not callable(getattr(module, name, None))]
    defects += _check_task(task)
    if not defects:
        defects += _distributed(module)
    if defects:
        raise ProblemError(str(path), defects)
    source = GpuModeSource(module)
    tests = [_case(c) for c in task["tests"]]
    benchmarks = [_case(c) for c in task["benchmarks"]]
    ranking = str(task.get("ranking_by", "last"))
    return Problem(
        name=path.name, path=path, reference=source.reference, make_inputs=source.make_inputs,
        test_cases=tests, bench_cases=benchmarks, flops=lambda case: 0,
        bytes_moved=source.bytes_moved, description=_description(task), format=GPUMODE,
        entry={"kind": "function", "name": ENTRY_FUNCTION,
               "import_paths": [str(p) for p in support]},
        entry_doc=ENTRY_DOC, reference_code=module.ref_kernel,
        shared_modules=shared_modules(path, task), check=source.check,
        tolerance_decides=False, writable=source.writable,
        derive_case=Sizes(tests + benchmarks, task.get("size_multiples") or {}).derive,
        ranking_by=ranking,
        timeouts={_TIMEOUTS[k]: float(task[k]) for k in _TIMEOUTS if _positive(task.get(k))},
        facts={"ranking_by": ranking},
    )


def _distributed(module: ModuleType) -> list[tuple[str, str]]:
    """A problem whose data is made per process of a multi-GPU job (amd_distributed's
    `generate_input(rank, world_size, ...)`) is not one krung runs: say so."""
    parameters = inspect.signature(module.generate_input).parameters
    rank = parameters.get("rank")
    if rank is None or rank.default is not inspect.Parameter.empty:
        return []
    return [("generate_input takes a `rank`: a multi-GPU problem whose data and reference "
             "are made per process of a distributed job",
             "krung evaluates single-process problems; run this one with GPU MODE's own "
             "distributed evaluator")]


def read_task(path: Path) -> dict[str, Any]:
    try:
        import yaml
    except ImportError:
        raise UsageError("reading a GPU MODE task.yml needs PyYAML, which is not installed",
                         hint="pip install pyyaml") from None
    file = path / TASK_FILE
    try:
        task = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ProblemError(str(path), [(f"{TASK_FILE} cannot be read: {exc}",
                                        f"fix {file} (YAML)")]) from exc
    if not isinstance(task, dict):
        raise ProblemError(str(path), [(f"{TASK_FILE} holds a {type(task).__name__}, not a "
                                        "mapping", "write tests:, benchmarks: and the other "
                                                   "keys at the top level")])
    return task


def _check_task(task: dict[str, Any]) -> list[tuple[str, str]]:
    defects = []
    example = '[{"size": 127, "seed": 4242}, ...]'
    for key in ("tests", "benchmarks"):
        cases = task.get(key)
        if not isinstance(cases, list) or not cases:
            defects.append((f"{TASK_FILE} has no `{key}` list",
                            f"add `{key}:` with one keyword dict per case, e.g. {example}"))
        elif not all(isinstance(c, dict) for c in cases):
            defects.append((f"`{key}` in {TASK_FILE} holds something other than keyword dicts",
                            f"write each case as a dict of generate_input's arguments, e.g. "
                            f"{example}"))
    multiples = task.get("size_multiples") or {}
    if not isinstance(multiples, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v > 0
            for k, v in multiples.items()):
        defects.append((f"size_multiples in {TASK_FILE} is not a mapping of size names to "
                        "positive integers", "write e.g. `size_multiples: {k: 128}`: the "
                        "multiple every value of that size must be"))
    ranking = task.get("ranking_by", "last")
    if ranking not in RANKINGS:
        defects.append((f"ranking_by {ranking!r} is not one of {', '.join(RANKINGS)}",
                        "use last (the last benchmark's time), mean or geom"))
    return defects


def support_dirs(path: Path, task: dict[str, Any]) -> list[Path]:
    """The problem's folder, then the folders of the files task.yml brings from elsewhere
    (GPU MODE's repository keeps `utils.py` and `eval.py` one level up)."""
    folders = [path.resolve()]
    for entry in task.get("files") or []:
        source = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(source, str) or source.startswith("@"):
            continue
        folder = (path / source).resolve().parent
        if (path / source).is_file() and folder not in folders:
            folders.append(folder)
    return folders


def shared_modules(path: Path, task: dict[str, Any]) -> list[str]:
    """Modules a version may import: task.yml's files other than the reference, the
    evaluator and the submission itself (task.py, utils.py)."""
    names = [entry.get("name") for entry in task.get("files") or [] if isinstance(entry, dict)]
    if not names:
        names = [p.name for p in path.glob("*.py")]
    return sorted(Path(n).stem for n in names
                  if isinstance(n, str) and n.endswith(".py") and n not in PRIVATE)


class GpuModeSource:
    """reference.py's functions behind krung's problem interface."""

    def __init__(self, module: ModuleType):
        self.module = module
        parameters = inspect.signature(module.generate_input).parameters
        self.takes_seed = "seed" in parameters or any(
            p.kind is p.VAR_KEYWORD for p in parameters.values())
        self.buffers: dict[Any, set[int]] = {}  # leaf layout -> output buffers
        self.data_bytes: dict[str, int] = {}

    def make_inputs(self, case: dict, seed: int, device: str) -> tuple:
        data = self._data(case, seed, device)
        self.writable((data,))  # learn its output buffers while the data is pristine
        return (data,)

    def _data(self, case: dict, seed: int, device: str) -> Any:
        import torch

        arguments = dict(case)
        if self.takes_seed:
            arguments["seed"] = seed % SEED_MODULUS
        # Some draw part of their data from torch's global generator (bioml/trimul's weights):
        # seeded from the case's seed too, that part is as reproducible as the rest.
        torch.manual_seed(seed % SEED_MODULUS)
        data = tree.map_tensors(lambda t: t.to(device), self.module.generate_input(**arguments))
        self.data_bytes[case_label(case)] = tree.nbytes(data)
        return data

    def reference(self, data: Any) -> Any:
        return self.module.ref_kernel(data)

    def writable(self, inputs: tuple) -> set[int]:
        """The output buffers among the data's tensors, found once per layout of the data:
        those ref_kernel writes (run on a copy), and those of an output's size whose
        contents it ignores (where it returns new tensors and leaves the buffer alone)."""
        layout = _layout(inputs)
        if layout not in self.buffers:
            copy = tree.clone(inputs)
            answer = tree.leaves(self.module.ref_kernel(copy[0]))
            written = {i for i, (a, b) in enumerate(
                zip(tree.leaves(inputs), tree.leaves(copy), strict=True)) if not _same(a, b)}
            sizes = {t.numel() for t in answer}
            ignored = {i for i, t in enumerate(tree.leaves(inputs))
                       if i not in written and t.numel() in sizes
                       and self._ignores(inputs, i, answer)}
            self.buffers[layout] = written | ignored
        return self.buffers[layout]

    def _ignores(self, inputs: tuple, index: int, answer: list) -> bool:
        """Whether the reference's answer keeps every bit with the index-th tensor poisoned:
        then that tensor is no input of the computation, only room for its output."""
        def poison(i: int, tensor: Any) -> Any:
            copy = tensor.clone()
            if i == index:
                copy.untyped_storage().fill_(0xFF)  # NaN in floats, -1 in integers
            return copy

        try:
            again = tree.leaves(self.module.ref_kernel(tree.map_leaves(poison, inputs)[0]))
        except Exception:  # the reference reads it, and chokes on the poison
            return False
        return len(again) == len(answer) and all(
            a.shape == b.shape and a.dtype == b.dtype and _same(a, b)
            for a, b in zip(answer, again, strict=True))

    def check(self, inputs: tuple, output: Any) -> tuple[bool, str]:
        return _outcome(self.module.check_implementation(inputs[0], output))

    def bytes_moved(self, case: dict) -> int:
        """The data's tensors, each read (or, for output buffers, written) once; a case whose
        data was not made yet (`krung describe`) has it made on the CPU first."""
        if case_label(case) not in self.data_bytes:
            self._data(case, int(case.get("seed", 0)), "cpu")
        return self.data_bytes[case_label(case)]


class Sizes:
    """Unseen cases for GPU MODE: every integer argument that varies among the declared
    cases moves to an awkward neighbour (odd, a prime where one is near), or, where task.yml's
    `size_multiples` names it, to another multiple of what it names; arguments that never
    vary are the problem's constants and stay."""

    def __init__(self, cases: list[dict], multiples: dict[str, int] | None = None):
        values: dict[str, list[Any]] = {}
        for case in cases:
            for key, value in case.items():
                values.setdefault(key, []).append(value)
        multiples = multiples or {}
        self.granules = {
            key: int(multiples.get(key, 1)) for key, found in values.items()
            if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in found)
            and len(set(found)) > 1}

    def derive(self, case: dict, rng: random.Random) -> dict | None:
        moved = {key: granular_neighbour(value, self.granules[key], rng)
                 if key in self.granules and value > 2 else value
                 for key, value in case.items()}
        return moved if moved != case else None


def _case(case: dict) -> dict:
    """A declared case without its seed: krung draws the seed."""
    return {k: v for k, v in case.items() if k != "seed"}


def _outcome(result: Any) -> tuple[bool, str]:
    """check_implementation's answer, in any of the shapes GPU MODE's problems use:
    (ok, message), a bool, an error string ('' passes), or a list of reasons."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], str):
        return bool(result[0]), result[1]
    if result is None:
        return True, ""
    if isinstance(result, str):
        return not result, result
    if isinstance(result, (list, tuple)):
        return not result, " ".join(str(r) for r in result)
    return bool(result), ""


def _layout(inputs: tuple) -> tuple:
    return tuple((label, tuple(t.shape), str(t.dtype), tuple(t.stride()), str(t.device))
                 for label, t in tree.labelled_leaves(inputs))


def _same(a: Any, b: Any) -> bool:
    import torch

    if a.numel() == 0:
        return True
    flat_a = a.detach().reshape(-1).contiguous().view(torch.uint8)
    flat_b = b.detach().reshape(-1).contiguous().view(torch.uint8)
    return torch.equal(flat_a, flat_b)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _description(task: dict[str, Any]) -> str:
    text = str(task.get("description") or "").strip()
    return text.split("\n\n")[0].strip()
