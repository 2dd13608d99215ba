"""run: the first test case runs; the outputs match the reference's in count, type, dtype,
shape and device, and are finite wherever the reference's are."""

from __future__ import annotations

from typing import Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.rungs.correctness import first_case
from krung.judge.rungs.spec import Figure, RungSpec
from krung.protocol.errors import RungFailed

SPEC = RungSpec(
    "run", order=30, needs=("compile",),
    checks="the first test case (on a CPU, as small as its block allows where it is too "
           "big for the interpreter) runs as a checked call (docs/trust.md); output count, "
           "type (a plain `torch.Tensor`), dtype, shape and device match the reference's; no "
           "NaN/Inf where the reference is finite",
    figures=(
        Figure("case", "", "the test case that ran", "text"),
        Figure("outputs", "", "the outputs the reference returns", "count"),
        Figure("call_ms", "ms", "the checked call, as the judge waited for it (inputs sent, "
               "outputs back)"),
    ))


def run(ctx: Context) -> dict[str, Any]:
    compiled = ctx.results.get("compile")
    if compiled is not None and compiled.figures.get("ran") is False:
        from krung.judge.rungs.compile.nvcc_only import NOT_RUN

        raise RungSkipped(NOT_RUN.format(arch=compiled.figures.get("arch")))
    case, label = first_case(ctx)
    what = f"case {label}"
    inputs = ctx.make_inputs(case, ctx.seed_for("run", 0))
    expected = ctx.expected(inputs)
    reply = ctx.checked_call(inputs, expected, what)
    for i, (out, ref) in enumerate(zip(reply["outputs"], expected, strict=True)):
        if not out.is_floating_point():
            continue
        bad = _nonfinite_where_finite(out, ref)
        if bad:
            raise RungFailed("NonFinite", f"output {i} has {bad} NaN/Inf values where the "
                             f"reference is finite (in {what})",
                             "look for reads of memory that was never written (masked loads "
                             "without `other`, padding lanes), divisions by zero, or overflow "
                             "in a narrow dtype")
    return {"case": label, "outputs": len(expected), "call_ms": round(
        reply["call_s"] * 1e3, 3)}


def _nonfinite_where_finite(out: Any, ref: Any) -> int:
    """How many elements of `out` are NaN or Inf where `ref`'s are finite: piece by piece
    where they have one shape (whole, the masks and `abs` temporaries of a 6 GiB output
    held about three copies of it beside the case's data), whole otherwise."""
    from krung.judge.metrics import paired  # torch's: the declarations load without it

    if tuple(out.shape) != tuple(ref.shape):
        return int((~out.isfinite() & ref.to(out.device).isfinite()).sum().item())
    return sum(int((~a.isfinite() & b.isfinite()).sum().item()) for _, a, b in paired(out, ref))
