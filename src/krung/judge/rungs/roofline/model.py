"""The roofline: how far a measured time is from what the device allows.

Pure arithmetic over figures (no torch, no GPU), so it is tested on known numbers. A bench
case does `flops` operations on `bytes_moved` bytes (the minimum: each input read once, each
output written once) in `time_us`. At the device's ceilings (DRAM bandwidth, and the compute
ceiling the version's kernels can reach: the tensor cores' peak of the case's precision, or
the pipes their SASS uses, krung.judge.rungs.roofline.pipes) it could take no less than

    roofline_us = max(bytes_moved / bandwidth, flops / peak)

The larger term is the ceiling that binds (memory or compute), and `roofline_us / time_us`
is the fraction of that ceiling the version reaches. A version faster than the roofline
allows (beyond a margin for calibration noise, and beyond what the L2 can explain when the
whole working set fits in it) is suspect: it skips work, or the problem overstates it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_THRESHOLD_PCT = 90.0
# Measured ceilings carry noise, and kernels that mostly read can beat a copy's bandwidth by
# a few percent: only a time more than this far past the roofline is suspect.
SUSPECT_MARGIN = 0.10

VERDICTS = ("at-roofline", "below", "suspect")

# The compute ceiling a case's dtype runs against (its tensor-core precision).
PRECISION_OF_DTYPE = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8", "int8": "int8",
    "float64": "fp64",
}


def precision_of(dtype: str, tf32: bool = False) -> str:
    """The compute ceiling for a case's dtype; float32 problems that accept TF32 results
    (tolerance "tf32") run against the TF32 peak."""
    precision = PRECISION_OF_DTYPE.get(dtype.removeprefix("torch."), "fp32")
    return "tf32" if precision == "fp32" and tf32 else precision


@dataclass(frozen=True)
class Ceilings:
    """What the device allows: DRAM bandwidth, matmul throughput per precision, the L2, and
    the pipes outside the tensor cores (`pipes_per_s`: fma and hfma2 in FLOP/s, mufu and int
    in operations/s, smem in bytes/s)."""

    dram_bytes_per_s: float
    flops_per_s: dict[str, float] = field(default_factory=dict)
    l2_bytes_per_s: float | None = None
    l2_size_bytes: int | None = None
    source: str = "measured"
    pipes_per_s: dict[str, float] = field(default_factory=dict)
    sm: str | None = None  # compute capability, "9.0"

    @classmethod
    def from_record(cls, record: dict[str, Any], source: str = "measured") -> Ceilings:
        """From a calibration record (krung.judge.rungs.roofline.ceilings)."""
        return cls(dram_bytes_per_s=float(record["dram_bytes_per_s"]),
                   flops_per_s={k: float(v) for k, v in record.get("flops_per_s", {}).items()
                                if v},
                   l2_bytes_per_s=record.get("l2_bytes_per_s"),
                   l2_size_bytes=record.get("l2_size_bytes"), source=source,
                   pipes_per_s={k: float(v) for k, v in
                                (record.get("pipes_per_s") or {}).items() if v},
                   sm=(record.get("device") or {}).get("sm"))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ComputeCeiling:
    """The compute ceiling a case runs against, and why that one."""

    name: str  # a precision ("bf16": its tensor-core or matmul peak) or a pipe ("fma", "mufu")
    per_s: float | None  # of the problem's FLOPs; None when nothing was measured for it
    label: str  # for people: "the bf16 tensor-core peak", "the FP32 FMA pipe"
    chosen_by: str  # what chose it: the SASS, or the dtype
    assumed: bool = False  # chosen from the dtype alone, not from the kernels' SASS
    # A pipe's ceiling as the bytes per second its instruction stream can move (the mix's
    # global bytes over its busiest pipe's time): then compute time = bytes / this, and
    # `per_s` is None. krung.judge.rungs.roofline.pipes says why bytes and not FLOPs.
    bytes_per_s: float | None = None
    # Nothing can exceed this FLOP/s (a measured peak, named `suspect_name`): the suspect
    # check's bound where `per_s` is a model's figure rather than a measured peak.
    suspect_per_s: float | None = None
    suspect_name: str | None = None


def dtype_ceiling(precision: str, ceilings: Ceilings, why: str) -> ComputeCeiling:
    """The ceiling of the case's dtype (the matmul peak of its precision), as an assumption:
    `why` says why the SASS could not choose."""
    return ComputeCeiling(precision, ceilings.flops_per_s.get(precision),
                          f"the {precision} peak", f"the dtype ({precision}), assumed: {why}",
                          assumed=True)


@dataclass(frozen=True)
class Point:
    """One bench case's place under the roofline."""

    flops: float
    bytes_moved: float
    time_us: float
    precision: str
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    intensity: float | None  # flops per byte; None when no bytes move
    ridge: float | None  # the intensity where the ceilings meet; None without a FLOP/s peak
    bound: str  # "memory" or "compute"
    ceiling: str  # "dram", or the compute ceiling's name when it binds
    ceiling_per_s: float  # bytes/s for dram and a pipe's instruction stream, flops/s otherwise
    roofline_us: float
    pct: float  # % of the binding ceiling reached: roofline_us / time_us
    verdict: str  # at-roofline, below, suspect
    why_suspect: str | None = None
    compute: ComputeCeiling | None = None  # the compute ceiling the case was placed under
    memory_s: float = 0.0  # the two terms of the roofline
    compute_s: float = 0.0

    @property
    def ceiling_label(self) -> str:
        """The binding ceiling, for people: "DRAM bandwidth", "the FP32 FMA pipe"."""
        if self.bound == "memory":
            return "DRAM bandwidth"
        return self.compute.label if self.compute else f"the {self.precision} peak"

    @property
    def compute_share(self) -> float:
        """The share of the roofline's time that is compute: compute / (compute + memory)."""
        total = self.compute_s + self.memory_s
        return self.compute_s / total if total > 0 else 0.0

    @property
    def headroom(self) -> float:
        """How many times faster the roofline allows (1.0 at the roofline)."""
        return self.time_us / self.roofline_us if self.roofline_us > 0 else math.inf


def place(flops: float, bytes_moved: float, time_us: float, ceilings: Ceilings,
          precision: str, threshold_pct: float = DEFAULT_THRESHOLD_PCT,
          compute: ComputeCeiling | None = None) -> Point:
    """Where a measured time stands against the ceilings: DRAM bandwidth and `compute` (by
    default the matmul peak of `precision`). Raises ValueError for a time or work that
    cannot be placed (no time, no work)."""
    if not time_us > 0:
        raise ValueError(f"the time must be positive, not {time_us}")
    if flops < 0 or bytes_moved < 0 or flops + bytes_moved == 0:
        raise ValueError(f"the work must be positive: flops={flops}, bytes_moved={bytes_moved}")
    seconds = time_us * 1e-6
    peak = compute.per_s if compute is not None else ceilings.flops_per_s.get(precision)
    name = compute.name if compute is not None else precision
    memory_s = bytes_moved / ceilings.dram_bytes_per_s
    stream = compute.bytes_per_s if compute is not None else None
    compute_s = bytes_moved / stream if stream else (flops / peak if peak else 0.0)
    bound = "compute" if compute_s > memory_s else "memory"
    roofline_s = max(memory_s, compute_s)
    achieved_flops = flops / seconds
    achieved_bytes = bytes_moved / seconds
    pct = 100 * roofline_s / seconds
    if compute is not None and compute.suspect_per_s:
        why = _why_suspect(achieved_flops, achieved_bytes, bytes_moved, ceilings,
                           compute.suspect_name or name, compute.suspect_per_s)
    else:
        why = _why_suspect(achieved_flops, achieved_bytes, bytes_moved, ceilings, name, peak)
    verdict = "suspect" if why else ("at-roofline" if pct >= threshold_pct else "below")
    return Point(
        flops=flops, bytes_moved=bytes_moved, time_us=time_us, precision=precision,
        achieved_flops_per_s=achieved_flops, achieved_bytes_per_s=achieved_bytes,
        intensity=flops / bytes_moved if bytes_moved else None,
        ridge=peak / ceilings.dram_bytes_per_s if peak else None,
        bound=bound, ceiling="dram" if bound == "memory" else name,
        ceiling_per_s=ceilings.dram_bytes_per_s if bound == "memory" else float(
            stream or peak or 0),
        roofline_us=roofline_s * 1e6, pct=pct, verdict=verdict, why_suspect=why,
        compute=compute, memory_s=memory_s, compute_s=compute_s)


def _why_suspect(achieved_flops: float, achieved_bytes: float, bytes_moved: float,
                 ceilings: Ceilings, name: str, peak: float | None) -> str | None:
    allowance = 1 + SUSPECT_MARGIN
    if peak and achieved_flops > peak * allowance:
        return (f"{achieved_flops / 1e12:.4g} TFLOP/s is above the measured {name} peak "
                f"of {peak / 1e12:.4g} TFLOP/s")
    bandwidth, where = ceilings.dram_bytes_per_s, "DRAM"
    fits_l2 = ceilings.l2_size_bytes is not None and bytes_moved <= ceilings.l2_size_bytes
    if fits_l2 and ceilings.l2_bytes_per_s:  # the L2 can hold the whole working set
        bandwidth, where = max(bandwidth, ceilings.l2_bytes_per_s), "L2"
    if achieved_bytes > bandwidth * allowance:
        return (f"{achieved_bytes / 1e9:.4g} GB/s is above the measured {where} bandwidth of "
                f"{bandwidth / 1e9:.4g} GB/s")
    return None


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
