"""The output contract: a version returns what the reference returns, exactly.

Same number of outputs, each a plain torch.Tensor (no subclass) with the reference's dtype and
shape, on the device the inputs were on.
"""

from __future__ import annotations

from typing import Any

from krung.errors import RungFailed

PLAIN_TENSOR = "torch.Tensor"


def check_outputs(reply: dict[str, Any], expected: list, device: str, what: str) -> None:
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
        if spec["dtype"] != str(ref.dtype).removeprefix("torch."):
            problems.append(f"has dtype {spec['dtype']}, the reference's is "
                            f"{str(ref.dtype).removeprefix('torch.')}")
        if list(spec["shape"]) != list(ref.shape):
            problems.append(f"has shape {tuple(spec['shape'])}, the reference's is "
                            f"{tuple(ref.shape)}")
        if spec["device"].split(":")[0] != device:
            problems.append(f"is on {spec['device']}, the inputs were on {device}")
        if problems:
            raise RungFailed("OutputContract", f"{name} {'; '.join(problems)} (in {what})",
                             "allocate outputs like the reference's: "
                             "torch.empty(shape, dtype=..., device=inputs[0].device)")
