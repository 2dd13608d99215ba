"""Does a problem's input generator behave? Checked in the judge before any rung, in every
format: on the smallest test case, inputs are deterministic in their seed, change with it,
are not all zeros, and the reference runs on them.

Output buffers handed in with the inputs (GPU MODE's `torch.empty` outputs) are left out:
their contents are whatever the allocator had, and the reference overwrites them.
"""

from __future__ import annotations

from typing import Any

from krung.judge.problem import GPUMODE, KERNELBENCH, Problem, case_size
from krung.protocol import tree
from krung.protocol.errors import ProblemError

Defects = list[tuple[str, str]]

# How each format names its generator, and how to make it use the seed krung passes.
_GENERATOR = {
    KERNELBENCH: ("get_inputs()", "draw the inputs with torch's random functions (torch.randn, "
                                  "torch.rand): krung seeds torch's global generator before "
                                  "each call"),
    GPUMODE: ("generate_input(**case)", "seed a generator from the `seed` argument and pass it "
                                        "to every random call: `g = torch.Generator(device=...)"
                                        ".manual_seed(seed)`"),
}
_NATIVE = ("make_inputs", "seed a generator from `seed` and pass it to every random call: "
                          "`g = torch.Generator(device=device).manual_seed(seed)`")


def check_behaviour(problem: Problem, device: str) -> None:
    """Run the generator and the reference on the smallest test case; raise on defects."""
    import torch

    name, fix_seed = _GENERATOR.get(problem.format, _NATIVE)
    case = min(problem.test_cases, key=case_size)
    defects: Defects = []

    def generate(seed: int) -> Any:
        try:
            return problem.make_inputs(dict(case), seed, device)
        except torch.cuda.OutOfMemoryError:  # the GPU's state, not the problem's defect
            raise
        except Exception as exc:
            raise _generator_failed(problem, name, case, device, exc) from exc

    first = generate(1234)
    flat = problem.format not in (KERNELBENCH, GPUMODE)
    if not isinstance(first, (tuple, list)) or (
            flat and not all(isinstance(t, torch.Tensor) for t in first)):
        raise ProblemError(str(problem.path), [(
            f"{name} returned {type(first).__name__}, not a tuple of tensors",
            "return a tuple of tensors, in the order reference(*inputs) takes them")])
    if not tree.leaves(first):
        raise ProblemError(str(problem.path), [(
            f"{name} returned no tensors", "return the inputs as tensors")])
    odd = unsendable(tuple(first))
    if odd:
        where, kind = odd
        raise ProblemError(str(problem.path), [(
            f"{name} returns a {kind} (at {where}): krung sends the data to the version's "
            "process as tensors and plain values (numbers, strings, tuples, lists, dicts), "
            "never pickled, and cannot send a Python object of the problem's own class",
            "krung cannot run this problem as it is; make the data tensors and plain values "
            "(a config's fields in a dict, a cache's tensors in a tuple)")])
    buffers = problem.writable_leaves(tuple(first))

    def drawn(inputs: tuple) -> list:
        return [t for i, t in enumerate(tree.leaves(inputs)) if i not in buffers]

    def same_as(inputs: Any, seed: int) -> bool:
        return all(_equal(a, b) for a, b in zip(drawn(inputs), drawn(generate(seed)),
                                                strict=True))

    if _zeros(drawn(first)) and _zeros(drawn(_largest_inputs(problem, device) or first)):
        # all zeros in the smallest case alone can be the data's own (helion's chunked
        # state over a single chunk is the zero initial state): the largest case decides
        defects.append((f"{name} returned an all-zero tensor",
                        "draw random values (torch.randn/rand with the seeded generator)"))
    # One more set of inputs alive at a time: KernelBench's declared sizes reach 6 GiB a set.
    if not same_as(first, 1234):
        defects.append((f"{name} is not deterministic: the same seed gave different inputs",
                        fix_seed))
    elif same_as(first, 4321):
        defects.append((f"{name} ignores its seed: two seeds gave the same inputs", fix_seed))
    try:
        problem.reference(*first)  # `first` is not needed after this: no clone
    except Exception as exc:
        defects.append((f"the reference on {name} for case {case} raised "
                        f"{type(exc).__name__}: {exc}{_where(exc, problem)}",
                        "make the reference run on every declared case"))
    if defects:
        raise ProblemError(str(problem.path), defects)


def _generator_failed(problem: Problem, name: str, case: dict, device: str,
                      exc: Exception) -> ProblemError:
    if device == "cpu" and _needs_cuda(exc):  # GPU MODE's problems make their data there
        return ProblemError(str(problem.path), [(
            f"{name} makes its data on CUDA, and this machine has no GPU in use (on case "
            f"{case} it raised {type(exc).__name__}: {_first_line(exc)})",
            "the problem hard-codes `cuda`: run it on a machine with an NVIDIA GPU "
            "(--device cuda)")])
    return ProblemError(str(problem.path), [(
        f"{name} on case {case} ({device}) raised {type(exc).__name__}: {exc}"
        f"{_where(exc, problem)}",
        f"make {name} work for every declared case on this device")])


def _zeros(tensors: list) -> bool:
    return any(t.numel() > 0 and not bool(t.ne(0).any()) for t in tensors)


def _largest_inputs(problem: Problem, device: str) -> tuple:
    case = max(problem.test_cases, key=case_size)
    try:
        return tuple(problem.make_inputs(dict(case), 1234, device))
    except Exception:  # the smallest case's zeros stand; the rest of the checks say more
        return ()


def _where(exc: BaseException, problem: Problem) -> str:
    """` at FILE:LINE`: the deepest line of the problem's own files the exception passed."""
    import traceback
    from pathlib import Path

    folder = Path(problem.path).resolve()
    folder = folder if folder.is_dir() else folder.parent
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve().is_relative_to(folder)]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def unsendable(value: Any, where: str = "") -> tuple[str, str] | None:
    """The first part of the inputs the channel cannot carry, as (where, its type)."""
    import torch

    if isinstance(value, torch.Tensor) or value is None or isinstance(
            value, (bool, int, float, str)):
        return None
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (tuple, list)):
        items = list(enumerate(value))
    else:
        return where or "the top", type(value).__qualname__
    for key, item in items:
        found = unsendable(item, f"{where}[{key!r}]")
        if found:
            return found
    return None


def _needs_cuda(exc: Exception) -> bool:
    """Whether an exception says CUDA was needed (torch's errors on a machine, or a build,
    without it)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(words in text for words in (
        "CUDA", "cuda", "Torch not compiled with CUDA enabled", "no NVIDIA driver"))


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else ""


def _equal(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
