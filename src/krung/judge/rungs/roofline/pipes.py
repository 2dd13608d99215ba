"""Which compute ceiling a version's kernels can reach, from their SASS instruction mix.

A kernel without tensor-core instructions (HMMA, HGMMA, IMMA, QGMMA, ...) cannot reach a
matmul's tensor-core peak: an elementwise fp32 GELU issues FFMA, FMUL and MUFU, and
comparing it with the bf16 tensor-core ceiling calls it memory-bound when its pipes are the
limit. So, from the artifacts rung's mix (krung.judge.rungs.artifacts.sass, summed over the
version's kernels):

- with tensor-core instructions: the tensor-core (matmul) peak of the case's precision; a
  float32 case on tensor cores runs as TF32, so its ceiling is TF32's;
- without: the pipe that takes longest over the mix at the measured rates. Each pipe's
  time is its instruction count over its rate: FFMA, FMUL, FADD on the FP32 FMA pipe (DFMA
  counted twice: Hopper's FP64 rate is half its FP32 rate), HFMA2, HMUL2, HADD2 on the FP16
  pipe, MUFU on the special function unit, IMAD on the integer pipe, and every instruction
  on issue (one warp instruction per clock per scheduler: the FP32 pipe's rate on sm_86 and
  newer, twice it where the FP32 pipe is half-width, sm_80 and older; named only when it
  takes ISSUE_NAMED times the slowest pipe's time, or more). The ceiling is the
  FLOP/s this mix reaches with that pipe saturated: the mix's floating-point work (2 per
  FFMA, 1 per FMUL or FADD, 4 per HFMA2, 1 per MUFU, ...) over the binding pipe's time.
  That is the problem's FLOP/s ceiling if the kernels do the problem's flops with this mix
  (counts are static, from the SASS text, not executed counts);
- where the artifacts rung did not run or found no SASS: the dtype's matmul peak, as before,
  marked as an assumption.
"""

from __future__ import annotations

from typing import Any

from krung.judge.rungs.roofline.model import Ceilings, ComputeCeiling, dtype_ceiling

# Per pipe: the mix's keys that issue to it (with a weight), the work one instruction does
# in the pipe's measured unit, and its name for people.
PIPE_OPS: dict[str, dict[str, float]] = {
    "fma": {"ffma": 1, "fmul": 1, "fadd": 1, "dfma": 2},
    "hfma2": {"hfma2": 1, "hmul2": 1, "hadd2": 1},
    "mufu": {"mufu": 1},
    "int": {"imad": 1},
}
WORK_PER_INSTRUCTION = {"fma": 2, "hfma2": 4, "mufu": 1, "int": 2}
LABELS = {
    "fma": "the FP32 FMA pipe",
    "hfma2": "the FP16 pipe outside the tensor cores (HFMA2)",
    "mufu": "the special function unit (MUFU: exp2, rsqrt, tanh, ...)",
    "int": "the INT32 pipe (IMAD)",
    "issue": "instruction issue (one warp instruction per clock per scheduler)",
}
# The floating-point work of one instruction, counted as the problem's flops would be.
FLOPS_PER_OP = {"ffma": 2, "fmul": 1, "fadd": 1, "dfma": 2, "hfma2": 4, "hmul2": 2,
                "hadd2": 2, "mufu": 1}
# Issue is named as the limit only when it takes this much longer than the slowest pipe:
# short of it, most of what issues is that pipe's own instructions.
ISSUE_NAMED = 1.25
# Compute capabilities whose FP32 pipe is half the issue width (16 lanes per scheduler).
HALF_WIDTH_FP32 = ("7.0", "7.2", "7.5", "8.0")


def version_mix(artifacts_figures: Any) -> dict[str, Any] | None:
    """The instruction mix of all the version's kernels (the artifacts rung's `per_kernel`
    rows, summed), or None when there is none to read."""
    if not isinstance(artifacts_figures, dict):
        return None
    mixes = [row["sass"] for row in artifacts_figures.get("per_kernel") or []
             if isinstance(row, dict) and not row.get("error") and isinstance(row.get("sass"),
                                                                               dict)]
    if not mixes:
        return None
    total: dict[str, Any] = {"kernels": len(mixes)}
    for mix in mixes:
        for key, value in mix.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
            elif key == "tensor_core" and isinstance(value, dict):
                ops = total.setdefault("tensor_core", {})
                for op, count in value.items():
                    ops[op] = ops.get(op, 0) + count
    return total


def issue_per_s(ceilings: Ceilings) -> float | None:
    """Thread instructions issued per second: the FP32 pipe's rate in instructions, doubled
    where that pipe is half the issue width."""
    fma = ceilings.pipes_per_s.get("fma")
    if not fma:
        return None
    return fma / 2 * (2 if ceilings.sm in HALF_WIDTH_FP32 else 1)


def pipe_times(mix: dict[str, Any], ceilings: Ceilings) -> dict[str, float]:
    """Each pipe's time over the mix, in seconds per mix (counts over rates), for the pipes
    it uses and whose rate is known."""
    times = {}
    for pipe, ops in PIPE_OPS.items():
        count = sum(weight * (mix.get(op) or 0) for op, weight in ops.items())
        rate = ceilings.pipes_per_s.get(pipe)
        if count and rate:
            times[pipe] = count / (rate / WORK_PER_INSTRUCTION[pipe])
    issue = issue_per_s(ceilings)
    if mix.get("instructions") and issue:
        times["issue"] = mix["instructions"] / issue
    return times


def compute_ceiling(mix: dict[str, Any] | None, precision: str, ceilings: Ceilings,
                    no_mix_why: str = "the artifacts rung did not run, so no SASS says "
                                      "which pipes the kernels use") -> ComputeCeiling:
    """The compute ceiling a case of `precision` runs against, from the version's mix."""
    if mix is None:
        return dtype_ceiling(precision, ceilings, no_mix_why)
    tensor = {op: n for op, n in (mix.get("tensor_core") or {}).items() if n}
    if tensor or mix.get("tensor_core_total"):
        on_tensor = "tf32" if precision == "fp32" else precision
        names = ", ".join(f"{op} x{n}" for op, n in tensor.items()) or "tensor-core instructions"
        return ComputeCeiling(on_tensor, ceilings.flops_per_s.get(on_tensor),
                              f"the {on_tensor} tensor-core peak", f"SASS: {names}")
    times = pipe_times(mix, ceilings)
    flops = sum(per_op * (mix.get(op) or 0) for op, per_op in FLOPS_PER_OP.items())
    fma = ceilings.pipes_per_s.get("fma")
    if not times or not flops:
        what = "no pipe rate was measured" if not ceilings.pipes_per_s else \
            "no floating-point instruction to weigh the pipes by"
        if fma:
            return ComputeCeiling("fma", fma, LABELS["fma"], f"SASS: no tensor-core "
                                  f"instruction, and {what}: the FP32 FMA pipe's peak is "
                                  "assumed", assumed=True)
        return dtype_ceiling(precision, ceilings, f"no tensor-core instruction, and {what}")
    binding = max(times, key=lambda pipe: times[pipe])
    slowest_pipe = max((p for p in times if p != "issue"), key=lambda p: times[p], default=None)
    if slowest_pipe and times[binding] <= ISSUE_NAMED * times[slowest_pipe]:
        label = LABELS[slowest_pipe]  # issue is that pipe's own instructions, mostly
        binding_name = slowest_pipe
    else:
        label, binding_name = LABELS[binding], binding
    counts = ", ".join(f"{op.upper()} x{mix[op]:g}" for op in (*FLOPS_PER_OP, "imad")
                       if mix.get(op))
    return ComputeCeiling(
        binding_name, flops / times[binding], label,
        f"SASS: no tensor-core instruction; of {counts} in {mix.get('instructions', 0):g} "
        f"instructions, {label} takes longest at the measured rates")
