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
  takes ISSUE_NAMED times the slowest pipe's time, or more);
- where the artifacts rung did not run or found no SASS: the dtype's matmul peak, as before,
  marked as an assumption.

A pipe's ceiling is scaled to the problem by bytes, not by FLOPs: the mix's global loads and
stores (LDG/STG, by width) are the bytes one thread moves for the instructions it issues, so
the kernel's instruction stream can move at most `bytes / busiest pipe's time` bytes per
second (`bytes_per_s`), and a case's compute time is its minimum bytes over that. Problems
count FLOPs by their own conventions (a GELU may be 8 FLOPs or 30), while the bytes a
kernel must move are the problem's minimum bytes; the counts are static (the SASS text, not
executed instructions), which for a loop weighs its body once, loads and arithmetic alike.
Where the mix's bytes are unknown (cp.async or TMA copies carry no width in the mix), the
pipe's FLOP/s over the mix's floating-point work (2 per FFMA, 1 per FMUL or FADD, 4 per
HFMA2, 1 per MUFU, ...) is the ceiling instead, and failing that the FMA pipe's peak,
marked as assumed.
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
            elif isinstance(value, dict):  # tensor_core, tma: by opcode; ldg, stg: by width
                counts = total.setdefault(key, {})
                for name, count in value.items():
                    counts[str(name)] = counts.get(str(name), 0) + count
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


def global_bytes(mix: dict[str, Any]) -> float | None:
    """Bytes one thread moves by its global loads and stores in the mix, or None where the
    mix moves data the widths do not show (cp.async, TMA) or moves none."""
    if mix.get("ldgsts") or mix.get("tma_total"):
        return None
    total = sum(int(bits) // 8 * count for kind in ("ldg", "stg")
                for bits, count in (mix.get(kind) or {}).items())
    return float(total) or None


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
    moved = global_bytes(mix)
    fma = ceilings.pipes_per_s.get("fma")
    if not times or not (moved or flops):
        what = "no pipe rate was measured" if not ceilings.pipes_per_s else \
            "no global load, store or floating-point instruction to scale the pipes by"
        if fma:
            return ComputeCeiling("fma", fma, LABELS["fma"], f"SASS: no tensor-core "
                                  f"instruction, and {what}: the FP32 FMA pipe's peak is "
                                  "assumed", assumed=True)
        return dtype_ceiling(precision, ceilings, f"no tensor-core instruction, and {what}")
    binding = max(times, key=lambda pipe: times[pipe])
    named = max((p for p in times if p != "issue"), key=lambda p: times[p], default=binding)
    if binding == "issue" and times["issue"] > ISSUE_NAMED * times.get(named, 0.0):
        named = "issue"  # far more than the busiest pipe's own instructions issue
    counts = ", ".join(f"{op.upper()} x{mix[op]:g}" for op in (*FLOPS_PER_OP, "imad")
                       if mix.get(op)) or "no arithmetic"
    said = (f"SASS: no tensor-core instruction; {counts} in {mix.get('instructions', 0):g} "
            f"instructions: {LABELS[named]} takes longest at the measured rates")
    top = max(((ceilings.pipes_per_s.get(p) or 0, p) for p in ("fma", "hfma2")),
              default=(0, "fma"))
    bound = {"suspect_per_s": top[0] or None, "suspect_name": f"{top[1]} pipe"}
    if moved:
        per_byte = mix.get("instructions", 0) / moved
        return ComputeCeiling(named, None, LABELS[named],
                              f"{said}, {per_byte:.3g} instructions per byte moved",
                              bytes_per_s=moved / times[binding], **bound)
    return ComputeCeiling(named, flops / times[binding], LABELS[named],
                          f"{said}; scaled by its FLOPs (the mix's bytes are not known)",
                          **bound)
