"""The roofline: how far a measured time is from what the device allows.

Pure arithmetic over figures (no torch, no GPU), so it is tested on known numbers. A bench
case does `flops` operations on `bytes_moved` bytes (the minimum: each input read once, each
output written once) in `time_us`. At the device's ceilings (DRAM bandwidth, and the math
throughput of the case's precision) it could take no less than

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

from krung.judge.device import SLOW_CLOCK

DEFAULT_THRESHOLD_PCT = 90.0
# Measured ceilings carry noise, and kernels that mostly read can beat a copy's bandwidth by
# a few percent: only a time more than this far past the roofline is suspect.
SUSPECT_MARGIN = 0.10
# Below this many microseconds at the roofline, launch and ramp-up latency are most of it.
SMALL_WORK_US = 5.0
# Profile throughputs (% of peak) below this on both memory and compute: latency-bound.
BUSY_PCT = 60.0

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
    """What the device allows: DRAM bandwidth, math throughput per precision, and the L2."""

    dram_bytes_per_s: float
    flops_per_s: dict[str, float] = field(default_factory=dict)
    l2_bytes_per_s: float | None = None
    l2_size_bytes: int | None = None
    source: str = "measured"

    @classmethod
    def from_record(cls, record: dict[str, Any], source: str = "measured") -> Ceilings:
        """From a calibration record (krung.judge.rungs.roofline.ceilings)."""
        return cls(dram_bytes_per_s=float(record["dram_bytes_per_s"]),
                   flops_per_s={k: float(v) for k, v in record.get("flops_per_s", {}).items()
                                if v},
                   l2_bytes_per_s=record.get("l2_bytes_per_s"),
                   l2_size_bytes=record.get("l2_size_bytes"), source=source)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
    ridge: float | None  # the intensity where the ceilings meet; None without a compute peak
    bound: str  # "memory" or "compute"
    ceiling: str  # "dram", or the precision whose peak binds
    ceiling_per_s: float  # bytes/s for dram, flops/s otherwise
    roofline_us: float
    pct: float  # % of the binding ceiling reached: roofline_us / time_us
    verdict: str  # at-roofline, below, suspect
    why_suspect: str | None = None

    @property
    def headroom(self) -> float:
        """How many times faster the roofline allows (1.0 at the roofline)."""
        return self.time_us / self.roofline_us if self.roofline_us > 0 else math.inf


def place(flops: float, bytes_moved: float, time_us: float, ceilings: Ceilings,
          precision: str, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> Point:
    """Where a measured time stands against the ceilings. Raises ValueError for a time or
    work that cannot be placed (no time, no work)."""
    if not time_us > 0:
        raise ValueError(f"the time must be positive, not {time_us}")
    if flops < 0 or bytes_moved < 0 or flops + bytes_moved == 0:
        raise ValueError(f"the work must be positive: flops={flops}, bytes_moved={bytes_moved}")
    seconds = time_us * 1e-6
    peak = ceilings.flops_per_s.get(precision)
    memory_s = bytes_moved / ceilings.dram_bytes_per_s
    compute_s = flops / peak if peak else 0.0
    bound = "compute" if compute_s > memory_s else "memory"
    roofline_s = max(memory_s, compute_s)
    achieved_flops = flops / seconds
    achieved_bytes = bytes_moved / seconds
    pct = 100 * roofline_s / seconds
    why = _why_suspect(achieved_flops, achieved_bytes, bytes_moved, ceilings, precision, peak)
    verdict = "suspect" if why else ("at-roofline" if pct >= threshold_pct else "below")
    return Point(
        flops=flops, bytes_moved=bytes_moved, time_us=time_us, precision=precision,
        achieved_flops_per_s=achieved_flops, achieved_bytes_per_s=achieved_bytes,
        intensity=flops / bytes_moved if bytes_moved else None,
        ridge=peak / ceilings.dram_bytes_per_s if peak else None,
        bound=bound, ceiling="dram" if bound == "memory" else precision,
        ceiling_per_s=ceilings.dram_bytes_per_s if bound == "memory" else float(peak or 0),
        roofline_us=roofline_s * 1e6, pct=pct, verdict=verdict, why_suspect=why)


def _why_suspect(achieved_flops: float, achieved_bytes: float, bytes_moved: float,
                 ceilings: Ceilings, precision: str, peak: float | None) -> str | None:
    allowance = 1 + SUSPECT_MARGIN
    if peak and achieved_flops > peak * allowance:
        return (f"{achieved_flops / 1e12:.4g} TFLOP/s is above the measured {precision} peak "
                f"of {peak / 1e12:.4g} TFLOP/s")
    bandwidth, where = ceilings.dram_bytes_per_s, "DRAM"
    fits_l2 = ceilings.l2_size_bytes is not None and bytes_moved <= ceilings.l2_size_bytes
    if fits_l2 and ceilings.l2_bytes_per_s:  # the L2 can hold the whole working set
        bandwidth, where = max(bandwidth, ceilings.l2_bytes_per_s), "L2"
    if achieved_bytes > bandwidth * allowance:
        return (f"{achieved_bytes / 1e9:.4g} GB/s is above the measured {where} bandwidth of "
                f"{bandwidth / 1e9:.4g} GB/s")
    return None


@dataclass(frozen=True)
class ProfileSignals:
    """What a profiler's summary says about one case, in % of the device's peaks."""

    memory_pct: float | None = None
    compute_pct: float | None = None
    occupancy_pct: float | None = None
    limiter: str | None = None

    @property
    def empty(self) -> bool:
        return all(v is None for v in asdict(self).values())


# Names a profile summary may use for each signal (Nsight Compute's Speed Of Light section
# and common spellings of it); the first one present wins.
_PROFILE_KEYS = {
    "memory_pct": ("memory_throughput_pct", "dram_throughput_pct", "memory_pct", "dram_pct",
                   "mem_throughput_pct", "memory_throughput", "dram_throughput"),
    "compute_pct": ("compute_throughput_pct", "sm_throughput_pct", "compute_pct", "sm_pct",
                    "compute_throughput", "sm_throughput"),
    "occupancy_pct": ("achieved_occupancy_pct", "occupancy_pct", "achieved_occupancy",
                      "occupancy"),
    "limiter": ("limiter", "bottleneck", "bound_by"),
}


def profile_signals(figures: Any, case: str | None = None) -> ProfileSignals:
    """The signals in a profile rung's figures, read defensively: from the row of `case` in
    `per_case` when there is one, else from the slowest of `per_kernel` (or `kernels`),
    else from the top level; nothing when the figures are of another case. Anything missing
    or of the wrong type is left out."""
    if not isinstance(figures, dict):
        return ProfileSignals()
    source: dict[str, Any] = figures
    rows = figures.get("per_case")
    if isinstance(rows, list):
        row = next((r for r in rows if isinstance(r, dict) and r.get("case") == case), None)
        if row is not None:
            source = {**figures, **row}
    elif case is not None and figures.get("case") not in (None, case):
        return ProfileSignals()  # the profile rung profiles one case: not this one
    kernels = source.get("per_kernel", source.get("kernels"))
    if isinstance(kernels, list) and kernels and all(isinstance(k, dict) for k in kernels):
        slowest = max(kernels, key=lambda k: _number(k.get("duration_ns"))
                      or (_number(k.get("duration_us")) or 0.0) * 1e3)
        source = {**source, **slowest}
    found: dict[str, Any] = {}
    for name, keys in _PROFILE_KEYS.items():
        for key in keys:
            value = source.get(key)
            if name == "limiter":
                if isinstance(value, str) and value.strip():
                    found[name] = value.strip()
                    break
            elif _number(value) is not None:
                found[name] = _number(value)
                break
    return ProfileSignals(**found)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def likely_limiter(point: Point, bench_row: dict[str, Any] | None = None,
                   profile: ProfileSignals | None = None) -> str:
    """Why a case is where it is, most specific first: what the benchmark saw (launches,
    kernel count), what the profiler says, else what the roofline position suggests."""
    if point.verdict == "suspect":
        return (f"faster than the roofline allows ({point.why_suspect}): the version may skip "
                "work, or flops()/bytes_moved() overstate it")
    ceiling = "DRAM bandwidth" if point.bound == "memory" else f"the {point.precision} peak"
    if point.verdict == "at-roofline":
        return (f"at {point.pct:.0f}% of {ceiling}: a faster version needs less work (fewer "
                "bytes moved or flops), not a better schedule")
    row = bench_row or {}
    reasons = []
    if point.roofline_us < SMALL_WORK_US:
        reasons.append(f"little work: {point.roofline_us:.2g} us at the roofline, so launch "
                       "and ramp-up latency dominate; do more work per launch")
    if row.get("launch_bound"):
        reasons.append(f"launch-bound: {_us(row.get('host_median_us'))} host-visible against "
                       f"{_us(row.get('median_us'))} on the device; fewer launches, or a "
                       "CUDA graph")
    kernels = _number(row.get("kernels_per_call"))
    if kernels is not None and kernels >= 1.5:
        reasons.append(f"{kernels:g} kernels per call: intermediate results go through "
                       "memory between them; fuse them into one")
    if profile is not None and not profile.empty:
        reasons.append(_profile_reason(point, profile))
    if not reasons:
        reasons.append(_position_reason(point))
    if row.get("clock_warning"):
        reasons.append(f"{row['clock_warning']}: part of the gap may be the clock's")
    timed, top = _number(row.get("sm_mhz_timed")), _number(row.get("sm_max_mhz"))
    if point.bound == "compute" and timed and top and timed < SLOW_CLOCK * top:
        reasons.append(f"the samples ran at {timed:.0f} MHz, {1 - timed / top:.0%} under the "
                       f"top clock ({top:.0f} MHz): compute-bound time grows as the clock "
                       "drops")
    if row.get("power_capped") and point.bound == "compute":
        reasons.append("the GPU was at its power limit (sw_power_cap): sustained heavy math "
                       "runs at a lower clock than the short-run peak, so part of the gap is "
                       "power")
    if point.ridge is None:
        reasons.append(f"no {point.precision} peak was measured, so only the memory ceiling "
                       "is known")
    return f"{point.pct:.0f}% of {ceiling}, {point.headroom:.2g}x from the roofline; " \
           + "; ".join(reasons)


def _profile_reason(point: Point, profile: ProfileSignals) -> str:
    parts = [f"{label} {value:.0f}%" for label, value in (
        ("memory", profile.memory_pct), ("compute", profile.compute_pct),
        ("occupancy", profile.occupancy_pct)) if value is not None]
    said = f"profile: {', '.join(parts)}" if parts else "profile"
    if profile.limiter:
        said += f", limiter {profile.limiter}"
    mem, comp = profile.memory_pct, profile.compute_pct
    if mem is not None and comp is not None and mem < BUSY_PCT and comp < BUSY_PCT:
        return (f"{said}: latency-bound (neither memory nor compute is busy): more work in "
                "flight per SM (occupancy, more independent loads, deeper pipelining)")
    if point.bound == "memory" and mem is not None and mem >= BUSY_PCT:
        return (f"{said}: the memory system is busy, yet DRAM moves less than the minimum "
                "bytes allow: extra traffic (re-reads, uncoalesced or partial-sector access)")
    if point.bound == "compute" and comp is not None and comp >= BUSY_PCT and \
            mem is not None and mem >= comp:
        return f"{said}: memory traffic holds the math back (tiles too small for reuse)"
    return said


def _position_reason(point: Point) -> str:
    if point.bound == "memory":
        return ("memory-bound: likely more bytes moved than the minimum (re-reads, uncoalesced "
                "or narrow loads) or too few loads in flight (occupancy, no vector loads)")
    return (f"compute-bound: the {point.precision} units idle part of the time (tile shape, "
            "pipelining, occupancy, epilogue) or the math is not on tensor cores")


def _us(value: Any) -> str:
    number = _number(value)
    return f"{number:.3g} us" if number is not None else "?"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
