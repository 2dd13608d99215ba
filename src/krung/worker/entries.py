"""What a version defines for krung to call, per problem format. Runs in the worker.

The judge says in the `load` request which entry to take:

- `{"kind": "function", "name": "kernel"}`: a module-level function (krung's own format;
  GPU MODE's is `custom_kernel`). It is called with the inputs.
- `{"kind": "module", "name": "ModelNew", "init_inputs": [...], "state": {...},
  "dtype": "float32"}`: a torch.nn.Module class (KernelBench). The worker builds
  `ModelNew(*init_inputs)`, moves it to the device and the dtype, and loads `state`, the
  reference model's parameters and buffers (random values drawn by the judge), so both models
  compute with the same weights. Calls run without autograd, as KernelBench's do.

Stdlib and torch only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FUNCTION = "function"
MODULE = "module"
DEFAULT_ENTRY = {"kind": FUNCTION, "name": "kernel"}


class EntryError(Exception):
    """The version does not define the entry the problem needs; carries the fix."""

    def __init__(self, error_type: str, message: str, hint: str):
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.hint = hint


def resolve(module: Any, entry: dict[str, Any], device: str) -> Callable[..., Any]:
    """The callable krung times and checks, from the imported version."""
    name = entry["name"]
    found = getattr(module, name, None)
    if entry["kind"] == MODULE:
        if not isinstance(found, type):
            raise EntryError("EntryPointMissing", f"the version defines no class `{name}`",
                             f"define `class {name}(torch.nn.Module)` with the reference "
                             "Model's constructor arguments and forward signature")
        return build_module(found, entry, device)
    if not callable(found):
        raise EntryError("EntryPointMissing", f"the version defines no callable `{name}`",
                         f"define `def {name}(...)` taking the reference's inputs")
    return found


def build_module(cls: type, entry: dict[str, Any], device: str) -> Any:
    import torch

    from krung.protocol.tree import map_tensors

    torch.set_grad_enabled(False)  # a dedicated process: KernelBench runs forward in no_grad
    init_inputs = map_tensors(lambda t: t.to(device), list(entry.get("init_inputs") or []))
    model = cls(*init_inputs)
    if not isinstance(model, torch.nn.Module):
        raise EntryError("EntryPointMissing",
                         f"{cls.__name__}(*init_inputs) is a {type(model).__name__}, not a "
                         "torch.nn.Module", f"make {cls.__name__} subclass torch.nn.Module")
    model = model.to(device=device, dtype=getattr(torch, entry.get("dtype") or "float32"))
    state = {k: v.to(device) for k, v in (entry.get("state") or {}).items()}
    check_state(model, state, cls.__name__)
    model.load_state_dict(state, strict=False)  # check_state has matched every name and shape
    return model


def check_state(model: Any, state: dict[str, Any], name: str) -> None:
    """ModelNew must hold the reference's parameters and buffers under the same names and
    shapes; parameters of its own would keep values krung never set. Extra buffers (derived
    constants, workspaces) are its own business."""
    mine = model.state_dict()
    parameters = {n for n, _ in model.named_parameters()}
    missing = sorted(set(state) - set(mine))
    extra = sorted(n for n in set(mine) - set(state) if n in parameters)
    shapes = sorted(f"{n} {tuple(mine[n].shape)} (the reference's is {tuple(state[n].shape)})"
                    for n in set(state) & set(mine) if mine[n].shape != state[n].shape)
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if extra:
        problems.append(f"parameters the reference Model lacks: {', '.join(extra)}")
    if shapes:
        problems.append(f"shapes differ: {'; '.join(shapes)}")
    if problems:
        raise EntryError(
            "ParameterMismatch",
            f"{name}'s parameters and buffers do not match the reference Model's: "
            f"{'; '.join(problems)}",
            f"krung loads the reference's (random) weights into {name}: keep Model's "
            "submodules and parameters under the same attribute names and shapes (e.g. "
            "self.linear = nn.Linear(...)), and compute with them in your own kernels")
