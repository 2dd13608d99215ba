"""The contract of one call of a version, checked in the judge after every call.

- Outputs: as many as the reference returns, each a plain torch.Tensor (no subclass) with the
  reference's dtype and shape, on the device the inputs were on. Where the problem's own
  check decides what it accepts (GPU MODE), dtype and shape are the check's to judge.
- Inputs: bit for bit as they were sent, unless the problem declares an in-place contract;
  output buffers passed among the inputs (GPU MODE's preallocated outputs) are the version's
  to write.
- Conduct: the timing and comparison functions are the ones the worker bound before the
  version was imported; the torch operators the call ran include none the problem forbids.
"""

from __future__ import annotations

from typing import Any

from krung.protocol import tree
from krung.protocol.errors import RungFailed

PLAIN_TENSOR = "torch.Tensor"


def dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def check_outputs(reply: dict[str, Any], expected: list, device: str, what: str,
                  exact: bool = True) -> None:
    """The outputs' count, type and device; with `exact`, their dtype and shape too."""
    specs = reply["specs"]
    was_tuple = reply.get("tuple", False)
    if len(specs) != len(expected) or (len(expected) == 1 and was_tuple):
        got = f"a tuple of {len(specs)}" if was_tuple else "1 tensor"
        want = f"a tuple of {len(expected)}" if len(expected) > 1 else "1 tensor"
        raise RungFailed("OutputContract", f"the version returned {got}, the reference {want} "
                         f"(in {what})", f"return {want}, in the reference's order")
    for i, (spec, ref) in enumerate(zip(specs, expected, strict=True)):
        name = f"output {i}" if len(expected) > 1 else "the output"
        problems = []
        if spec["type"] != PLAIN_TENSOR:
            problems.append(f"is a {spec['type']}, not a plain {PLAIN_TENSOR}")
        if exact and spec["dtype"] != dtype_name(ref):
            problems.append(f"has dtype {spec['dtype']}, the reference's is {dtype_name(ref)}")
        if exact and list(spec["shape"]) != list(ref.shape):
            problems.append(f"has shape {tuple(spec['shape'])}, the reference's is "
                            f"{tuple(ref.shape)}")
        if spec["device"].split(":")[0] != device:
            problems.append(f"is on {spec['device']}, the inputs were on {device}")
        if problems:
            raise RungFailed("OutputContract", f"{name} {'; '.join(problems)} (in {what})",
                             "allocate outputs like the reference's: "
                             "torch.empty(shape, dtype=..., device=inputs[0].device)")


def check_inputs_unchanged(after: list, before: tuple, what: str,
                           writable: set[int] | None = None) -> None:
    """Every tensor of the inputs, at any depth, as it was sent, except the output buffers."""
    now = tree.labelled_leaves(list(after))
    then = tree.labelled_leaves(list(before))
    if [label for label, _ in now] != [label for label, _ in then]:
        raise RungFailed("InputMutated", f"the call changed the structure of its inputs (in "
                         f"{what})", "a version must not add, remove or replace the "
                         "tensors it was given")
    for index, ((label, new), (_, old)) in enumerate(zip(now, then, strict=True)):
        if index not in (writable or set()) and not _same_bits(new, old):
            # `input 1` for a flat tuple, `input [0][2]` inside a structure
            name = f"input {label[1:-1]}" if label.count("[") == 1 else f"input {label}"
            buffers = " other than the output buffers it is given" if writable else ""
            raise RungFailed("InputMutated", f"{name} was changed by the call (in {what})",
                             f"a version must not write its inputs{buffers} (the problem "
                             "declares no in-place contract): write results to new output "
                             "tensors")


def check_conduct(reply: dict[str, Any], what: str, forbidden_ops: set[str]) -> None:
    tampered = reply.get("tampered") or []
    if tampered:
        raise RungFailed("Tampering", f"the version replaced {', '.join(tampered)} (in {what})",
                         "a version must not patch timing, synchronisation or comparison "
                         "functions")
    used = {_op_name(op) for op in reply.get("ops") or []}
    banned = sorted(used & forbidden_ops)
    if banned:
        swallowed = swallowed_said(reply)
        fallback = f", falling back after it caught {swallowed}" if swallowed else ""
        raise RungFailed("ForbiddenOp", f"the call ran {', '.join('aten::' + b for b in banned)},"
                         f" which the problem forbids{fallback} (in {what})",
                         (f"fix that error in your kernel ({swallowed}) rather than falling "
                          "back to torch; " if swallowed else "")
                         + "compute the core operation in your own kernel instead of "
                         "delegating it to torch or a vendor library")


def swallowed_said(reply: dict[str, Any]) -> str | None:
    """The first error the version caught from its own kernel's compile or launch in this
    call, as `CompilationError from kernel _k: ...`; None where it caught none."""
    swallowed = reply.get("swallowed") or []
    if not swallowed:
        return None
    first = swallowed[0]
    more = f" (and {len(swallowed) - 1} more)" if len(swallowed) > 1 else ""
    return f"{first['type']} from kernel {first['kernel']}: {first['message']}{more}"


def _op_name(op: str) -> str:
    return op.removeprefix("aten::").split(".")[0]


def forbidden_op_names(names: list[str]) -> set[str]:
    return {_op_name(n) for n in names}


def _same_bits(a: Any, b: Any) -> bool:
    """Bit for bit equal, compared piece by piece (no whole copy of a large input)."""
    import torch

    from krung.judge.metrics import paired

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return all(torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))
               for _, x, y in paired(a, b))
