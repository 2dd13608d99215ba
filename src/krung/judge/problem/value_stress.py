"""Value stress: checked and timed inputs whose values leave the problem's generator's
distribution, where the reference stays meaningful.

A version can be right only on the values the generator draws: a norm that is nearly the
identity on `randn`, top-k with fixed thresholds, a cheap path chosen by the magnitude of a
prefix, a scatter or a routing that assumes indices spread evenly. Unseen sizes never show
that. Each stress is made from the generator's own draw, so shapes, dtypes, signs and the
problem's structure are kept:

- `magnitudes x8`, `magnitudes /8`: every value times a power of two (exact in binary floats,
  but for float16's smallest values, which become subnormal);
- `ramped`: magnitudes rising from 2^-4 to 2^4 along the tensor, so that its start looks like
  the generator's draw and its end does not;
- `sorted`: the values sorted over the whole tensor (zeros kept in their places), so rows
  differ from each other (routing and top-k become unbalanced);
- `ties`: values rounded to a grid of half their standard deviation, so many are equal;
- `skewed indices`: integer tensors resampled from their own values, three quarters of them
  one value (collisions in scatters, histograms and routing).

Left as drawn: output buffers, tensors of one element, bool and complex tensors, float4
tensors (two values packed in a byte: torch has no arithmetic on them), discrete-valued
floating tensors (masks, one-hot: few distinct values among many), integer
tensors that are monotone (offsets) or hold no value twice (permutations), and for
`ramped` and `sorted` (which move values between positions) symmetric matrices and
tensors sorted along their last dimension. A stress that changes no tensor does not run; one
whose reference raises or gives NaN/Inf, or (for `ties`) returns integers, whose ties no
element-wise comparison can decide, or whose reference's own outputs the problem's check
rejects, is skipped and said (krung.judge.rungs.correctness). So is one where the problem's
tolerance covers rounding on the generator's values but not on the stressed ones: the
reference's outputs on inputs whose floating values moved by a few float32 units in the last
place (a random sign each) pass the check on the generator's draw and fail it on the stressed
draw. An absolute tolerance set for the generator's magnitudes is that: `magnitudes x8`
multiplies a matmul's rounding by 64, and an honest float32 matmul failed an atol of 1e-4
where an output sat near zero. (Where rounding fails the check on the generator's values too,
the problem wants exact outputs, and honest code does not round: the stress stays.)

Off on a GPU until it passes the GPU gate (KRUNG_VALUE_STRESS, docs/trust.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from krung.protocol import tree

RAMP_EXPONENTS = (-4, 4)  # the ramp's magnitudes: 2^-4 .. 2^4, in whole powers of two
ROUNDING_ULPS = 4  # rounded_apart: a few units, so that a stress it keeps is safe for honest code
HOT_SHARE = 0.75  # `skewed indices`: the share of elements given one value
DISCRETE_VALUES = 16  # a floating tensor with at most this many distinct values among ...
DISCRETE_SAMPLE = 4096  # ... its first elements, and many repeats, is a mask or a label


@dataclass(frozen=True)
class Stress:
    name: str
    meaning: str
    floats: Callable[[Any, Any], Any] | None = None  # (tensor, generator) -> tensor
    integers: Callable[[Any, Any], Any] | None = None
    moves_values: bool = False  # values change places: structure (symmetry, order) is lost
    integer_outputs_ok: bool = True  # False: ties make integer outputs ambiguous


def _scaled(factor: float) -> Callable[[Any, Any], Any]:
    return lambda x, _: (_wide(x) * factor).to(x.dtype)


def _ramped(x: Any, _: Any) -> Any:
    import torch

    low, high = RAMP_EXPONENTS
    steps = high - low + 1
    exponents = (torch.arange(x.numel(), device=x.device) * steps // x.numel() + low)
    factors = torch.pow(2.0, exponents.to(torch.float32)).to(_wide(x).dtype)
    return (_wide(x).flatten() * factors).view(x.shape).to(x.dtype)


def _sorted(x: Any, _: Any) -> Any:
    """Sorted over the whole tensor, zeros kept where they are (a triangle, a band, a
    sparsity pattern is structure the problem may promise)."""
    flat = _wide(x).flatten().clone()  # float64 comes as itself: never write the input
    nonzero = flat != 0
    flat[nonzero] = flat[nonzero].sort().values
    return flat.view(x.shape).to(x.dtype)


def _ties(x: Any, _: Any) -> Any:
    import torch

    wide = _wide(x)
    step = float(wide.std()) / 2
    if not step > 0:
        return x
    return (torch.round(wide / step) * step).to(x.dtype)


def _skewed(x: Any, generator: Any) -> Any:
    import torch

    flat = x.flatten()
    hot = flat[int(torch.randint(flat.numel(), (1,), generator=generator))]
    chosen = torch.rand(flat.numel(), generator=generator).to(x.device) < HOT_SHARE
    return torch.where(chosen, hot, flat).view(x.shape)


STRESSES = (
    Stress("magnitudes x8", "every floating value times 8", floats=_scaled(8.0)),
    Stress("magnitudes /8", "every floating value divided by 8", floats=_scaled(0.125)),
    Stress("ramped", "magnitudes rising from 2^-4 to 2^4 along each floating tensor",
           floats=_ramped, moves_values=True),
    Stress("sorted", "each floating tensor's values sorted over the whole tensor, zeros kept "
           "in their places",
           floats=_sorted, moves_values=True),
    Stress("ties", "floating values rounded to half their standard deviation: many equal",
           floats=_ties, integer_outputs_ok=False),
    Stress("skewed indices", "integer tensors resampled from their own values, three "
           "quarters of them one value", integers=_skewed),
)


def stressed(inputs: Any, stress: Stress, writable: set[int], seed: int) -> Any | None:
    """`inputs` with `stress` applied to every tensor it may change; None when it changes
    none (the stress does not apply to these inputs)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    changed = [False]

    def apply(index: int, tensor: Any) -> Any:
        transform = _transform_for(stress, tensor)
        if index in writable or transform is None:
            return tensor
        if stress.moves_values and structured(tensor):
            return tensor
        result = _laid_out_like(tensor, transform(tensor, generator))
        if result is not tensor and not torch.equal(result, tensor):
            changed[0] = True
        return result

    with torch.no_grad():
        result = tree.map_leaves(apply, inputs)
    return result if changed[0] else None


def rounded_apart(inputs: Any, writable: set[int], seed: int) -> Any:
    """`inputs` with every floating value an input may hold moved by ROUNDING_ULPS units in
    the last place of float32 (of float64 for float64 tensors), up or down at random: more
    than honest code computing in float32 differs by. In float16 and bfloat16 tensors that
    rounds back to the same values (their honest code computes in float32 too). Output
    buffers are left as they are. Piece by piece: whole-tensor signs (int64) and float64
    temporaries took 32 bytes per element beside a float32 input's 4, 56 GiB for a 7 GiB
    input at KernelBench's declared sizes."""
    import torch

    from krung.judge.metrics import piece_size

    # One generator on the CPU for every tensor in turn: drawn in pieces, the signs are the
    # ones a whole draw gives, so a seed moves the values as it did before.
    generator = torch.Generator().manual_seed(seed)

    def apply(index: int, tensor: Any) -> Any:
        if index in writable or not tensor.is_floating_point() or tensor.numel() == 0 \
                or _packed(tensor):
            return tensor
        unit = torch.finfo(torch.float64 if tensor.dtype == torch.float64 else torch.float32)
        source = tensor.reshape(-1)
        moved = torch.empty(tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        size = piece_size(tensor.numel())
        for start in range(0, tensor.numel(), size):
            part = source[start:start + size]
            signs = torch.randint(0, 2, part.shape, generator=generator,
                                  dtype=torch.int8).to(part.device)
            step = (2 * signs - 1).to(torch.float64) * (ROUNDING_ULPS * unit.eps)
            moved[start:start + size] = (part.double() * (1 + step)).to(tensor.dtype)
        moved = moved.view(tensor.shape)
        return moved if tensor.is_contiguous() else torch.empty_like(tensor).copy_(moved)

    with torch.no_grad():
        return tree.map_leaves(apply, inputs)


def meaningless(stress: Stress, expected: list) -> str | None:
    """Why the reference's outputs on stressed inputs decide nothing (None: they do)."""
    import torch

    tensors = tree.leaves(expected)
    if any(t.is_floating_point() and not bool(torch.isfinite(t).all()) for t in tensors):
        return "the reference gives NaN or Inf on these values"
    if not stress.integer_outputs_ok and any(
            not t.is_floating_point() and not t.is_complex() for t in tensors):
        return "the reference returns integers (indices), whose ties it may break either way"
    return None


def _transform_for(stress: Stress, tensor: Any) -> Callable[[Any, Any], Any] | None:
    import torch

    if tensor.numel() < 2 or tensor.dtype == torch.bool or tensor.is_complex():
        return None
    if tensor.is_floating_point():
        values = _comparable(tensor)
        return None if stress.floats is None or values is None or _discrete(values) \
            else stress.floats
    if stress.integers is None or _monotone(tensor) or _all_distinct(tensor):
        return None
    return stress.integers


def _laid_out_like(tensor: Any, values: Any) -> Any:
    """`values` in `tensor`'s strides (a transposed input stays transposed); `tensor`
    itself where it is expanded (a stride of 0 has no room for other values)."""
    import torch

    if values.stride() == tensor.stride():
        return values
    if any(stride == 0 and size > 1
           for stride, size in zip(tensor.stride(), tensor.shape, strict=True)):
        return tensor
    return torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype,
                               device=tensor.device).copy_(values)


def _wide(x: Any) -> Any:
    """`x` in a dtype the transforms compute in exactly enough (float8 cannot multiply)."""
    import torch

    return x if x.dtype == torch.float64 else x.to(torch.float32)


def _packed(tensor: Any) -> bool:
    """float4: two values packed in a byte, with no elementwise view to compute on."""
    return "float4" in str(tensor.dtype)


def _comparable(tensor: Any) -> Any | None:
    """`tensor`'s values in a dtype that compares, sorts and subtracts: float8 widened to
    float32 (exactly; torch has only equality for float8), None for float4 (`_packed`), the
    tensor itself otherwise."""
    if not tensor.is_floating_point() or tensor.element_size() > 1:
        return tensor
    return None if _packed(tensor) else tensor.float()


def _discrete(tensor: Any) -> bool:
    sample = tensor.flatten()[:DISCRETE_SAMPLE]
    distinct = int(sample.unique().numel())
    return distinct <= DISCRETE_VALUES and distinct * 4 <= sample.numel()


def _monotone(tensor: Any) -> bool:
    flat = tensor.flatten()
    steps = flat[1:] - flat[:-1]
    return bool((steps >= 0).all()) or bool((steps <= 0).all())


def _all_distinct(tensor: Any) -> bool:
    return int(tensor.flatten().unique().numel()) == tensor.numel()


def structured(tensor: Any) -> bool:
    """Symmetric (KernelBench's matmul of symmetric matrices) or sorted along its last
    dimension: what the problem's reference and an honest version may rely on, so values
    are not moved between its positions (here, nor by the benchmark's timed input changes;
    zeros, the other common structure, are kept by both)."""
    values = _comparable(tensor)
    if values is None:  # float4: nothing moves its values (neither stress nor timed change)
        return True
    if values.dim() >= 2 and values.shape[-1] == values.shape[-2] and \
            bool((values == values.mT).all()):
        return True
    return values.shape[-1] > 1 and bool((values[..., 1:] >= values[..., :-1]).all())
