"""The cases' inputs as shapes only, so a CPU can learn which kernels the bench cases launch.

On a CPU the benchmark times small stand-in cases (krung.judge.problem.cpu_cases), so the
specialisations the GPU-sized bench cases need (BLOCK=32768, more warps) never launch under
the interpreter. Running a bench case there would take minutes, but which Triton kernels a
case launches, and with which constexprs, dtypes and integer classes, depends on its shapes,
not its values. So the judge makes each case's inputs on torch's `meta` device (shapes,
strides and dtypes, no memory, no values: `meta_inputs`) and sends them as JSON
(`encode`); the build process rebuilds them (`decode`), calls the version's entry on them
with every Triton launch noted and none run (krung.judge.rungs.artifacts.triton_backend), and
compiles what the bench cases launched. The test cases go the same way, only to say which
case launched each kernel the interpreter ran.

A generator that needs values (`.item()`, data-dependent shapes) cannot make meta inputs:
that case is left out, and the rung says so.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import Any

from krung.judge.ladder import Context

# The kinds of case, in the order their labels are listed.
KINDS = ("bench", "cpu bench", "test", "unseen")


def dry_cases(ctx: Context) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str]]:
    """Every case of the run as {"kind", "label", "inputs"} with meta inputs in JSON, the
    entry to call with them (`dry_entry`), and why each bench case that could not be made so
    was left out (a test case left out only goes unnamed among the cases that launched a
    kernel)."""
    from krung.judge.problem import case_label
    from krung.judge.problem.unseen import unseen_cases

    problem = ctx.problem
    try:
        entry = dry_entry(problem.entry)
    except TypeError as exc:
        return [], None, [f"the bench cases' kernels: the entry's constructor inputs cannot "
                          f"be described by shape: {exc}"]
    declared = problem.test_cases
    unseen = unseen_cases(declared, ctx.seed_for("unseen"), problem.derive_case)
    listed = [("bench", problem.bench_cases), ("cpu bench", problem.bench_cases_for("cpu")),
              ("test", declared), ("unseen", unseen)]
    cases, skipped = [], []
    for kind, group in listed:
        for case in group:
            label = case_label(case)
            try:
                inputs = encode(meta_inputs(ctx, case))
            except Exception as exc:  # the generator needs values: a bench case says so
                if kind == "bench":
                    skipped.append(f"bench case {label}: its inputs could not be made as "
                                   f"shapes alone (meta tensors): {type(exc).__name__}: {exc}")
                continue
            cases.append({"kind": kind, "label": label, "inputs": inputs})
    return cases, entry, skipped


def dry_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """The problem's entry for the build process: a KernelBench model's constructor inputs
    as shapes, without the weights (what it launches does not depend on them)."""
    shown = {k: v for k, v in entry.items() if k not in ("state", "init_inputs")}
    if "init_inputs" in entry:
        shown["init_inputs"] = encode(list(entry["init_inputs"] or []))
    return shown


def meta_inputs(ctx: Context, case: dict) -> tuple:
    """The case's inputs as the problem makes them, on the meta device."""
    with meta_device(), dynamo_not_imported():
        return tuple(ctx.problem.make_inputs(dict(case), ctx.seed_for("artifacts"), "cpu"))


def meta_device() -> Any:
    """A mode under which every tensor a generator makes lands on the meta device, whatever
    device it names, and random draws ignore their generator (there are no values)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    factories = _device_constructors()
    moves = {torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.pin_memory}

    class MetaDevice(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                               kwargs: dict | None = None) -> Any:
            kwargs = dict(kwargs or {})
            if func in factories:
                kwargs["device"] = "meta"
                kwargs.pop("generator", None)
                kwargs.pop("pin_memory", None)
            elif func in moves:
                return args[0]
            elif func is torch.equal:  # no values to differ (GPU MODE compares to learn buffers)
                return True
            elif func is torch.Tensor.to:  # keep the dtype, drop the device
                args = tuple(a for a in args if not isinstance(a, (str, torch.device)))
                kwargs.pop("device", None)
            kwargs.pop("generator", None)  # in-place draws: normal_, uniform_, random_
            return func(*args, **kwargs)

    return MetaDevice()


@contextlib.contextmanager
def dynamo_not_imported() -> Iterator[None]:
    """Meta tensors' ops without importing torch._dynamo (and sympy with it): 1.5 to 2 s of
    a CPU per process, for nothing here. Most of torch's meta kernels are its Python
    references (torch._refs), each wrapped by torch._compile._disable_dynamo so that dynamo
    does not trace into it: on its first call the wrapper imports torch._dynamo to make the
    disabled function, and caches that as the reference's `__dynamo_disable`. While
    torch._dynamo is not imported nothing can be tracing, and the disabled function does what
    the reference does; so for the duration each reference is its own cached one, and after,
    the wrappers are as they were. Where torch is laid out otherwise, nothing changes."""
    if "torch._dynamo" in sys.modules:
        yield
        return
    references = [fn for fn in _disabled_references() if "__dynamo_disable" not in vars(fn)]
    for fn in references:
        fn.__dynamo_disable = fn
    try:
        yield
    finally:
        for fn in references:
            if vars(fn).get("__dynamo_disable") is fn:
                del fn.__dynamo_disable


@functools.cache
def _disabled_references() -> tuple[Any, ...]:
    """The functions torch._compile._disable_dynamo wrapped among torch's meta kernels and
    what they call, found through the wrappers' `__wrapped__` and closures."""
    import types

    import torch._compile
    from torch._decomp import global_decomposition_table

    inner = [c for c in torch._compile._disable_dynamo.__code__.co_consts
             if isinstance(c, types.CodeType) and c.co_name == "inner"]
    if len(inner) != 1 or "fn" not in inner[0].co_freevars:
        return ()
    slot = inner[0].co_freevars.index("fn")
    todo: list[Any] = [f for table in global_decomposition_table.values() for f in table.values()]
    for name, module in list(sys.modules.items()):
        if name.startswith(("torch._refs", "torch._prims", "torch._decomp")):
            todo += [v for v in vars(module).values() if isinstance(v, types.FunctionType)]
    seen: set[int] = set()
    found: dict[int, Any] = {}
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, functools.partial):
            todo.append(f.func)
            continue
        if not isinstance(f, types.FunctionType):
            continue
        if getattr(f, "__wrapped__", None) is not None:
            todo.append(f.__wrapped__)
        if f.__code__ is inner[0]:
            wrapped = f.__closure__[slot].cell_contents
            if isinstance(wrapped, types.FunctionType):
                found[id(wrapped)] = wrapped
        for cell in f.__closure__ or ():
            with contextlib.suppress(ValueError):  # a cell not yet filled
                if callable(cell.cell_contents):
                    todo.append(cell.cell_contents)
    return tuple(found.values())


def encode(value: Any) -> Any:
    """Meta inputs as JSON: a tensor's shape, strides, offset and dtype; tuples, lists and
    dicts around them; numbers, strings and None as they are."""
    import torch

    if isinstance(value, torch.Tensor):
        return {"meta": {"shape": list(value.shape), "stride": list(value.stride()),
                         "offset": value.storage_offset(),
                         "dtype": str(value.dtype).removeprefix("torch.")}}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": [[str(k), encode(v)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"an input of type {type(value).__name__} cannot be described by shape")


def decode(value: Any) -> Any:
    """`encode`'s JSON back as meta tensors (in the build process)."""
    import torch

    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "meta" in value:
            spec = value["meta"]
            shape, stride, offset = spec["shape"], spec["stride"], spec["offset"]
            extent = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(
                shape, stride, strict=True))
            storage = torch.empty(offset + extent, dtype=getattr(torch, spec["dtype"]),
                                  device="meta")
            return storage.as_strided(shape, stride, offset)
        if "tuple" in value:
            return tuple(decode(v) for v in value["tuple"])
        if "dict" in value:
            return {k: decode(v) for k, v in value["dict"]}
    return value
