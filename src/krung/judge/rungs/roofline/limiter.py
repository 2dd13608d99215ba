"""The likely limiter of a bench case: rules over what was measured, none contradicting another.

Each rule is a row of RULES: a condition over the case's facts (its place under the
roofline, what the benchmark saw, and Nsight Compute's counters when the profile rung ran
on this case), the text it adds, what it claims (tags such as "memory-bound"), and the
first thing to try when it is the most pressing. Every rule whose condition holds adds its
text, in table order; CONTRADICTIONS lists the claims that may never be made together, and
the conditions are written so that they never are (tests/test_limiter.py checks every
branch with recorded ncu figures, and all combinations for contradictions).

What the counters decide, when there are some (ncu's throughputs, % of each unit's peak):
neither memory nor compute busy (< BUSY_PCT): latency-bound; compute the busier: the pipes
are the limit, whatever the position under the roofline says; memory the busier: memory-
bound, and then DRAM's bytes against the problem's minimum say how: more than EXTRA_TRAFFIC
times it is extra traffic, less than FEWER_BYTES times it means the L2 served the rest, and
in between DRAM's own throughput says whether DRAM or an on-chip level is the busy one.
Without counters for the case, the position alone (below or above the ridge) names the
bound, and says it is a reading of the position.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from krung.judge.device import SLOW_CLOCK
from krung.judge.rungs.roofline.model import Point

# Below this many microseconds at the roofline, launch and ramp-up latency are most of it.
SMALL_WORK_US = 5.0
# A throughput (% of the unit's peak) at or above this is busy.
BUSY_PCT = 60.0
# DRAM bytes over the problem's minimum: above EXTRA_TRAFFIC, extra traffic; below
# FEWER_BYTES, part of the data came from the L2 instead.
EXTRA_TRAFFIC = 1.25
FEWER_BYTES = 0.8


@dataclass(frozen=True)
class ProfileSignals:
    """What a profiler's summary says about one case, in % of the device's peaks, with the
    DRAM bytes its kernels moved."""

    memory_pct: float | None = None
    compute_pct: float | None = None
    occupancy_pct: float | None = None
    limiter: str | None = None
    dram_pct: float | None = None
    dram_bytes: float | None = None  # read + written, over the call's profiled launches
    stalls: tuple[str, ...] = ()
    kernel: str | None = None  # the slowest kernel, whose throughputs these are

    @property
    def empty(self) -> bool:
        return all(v in (None, ()) for v in asdict(self).values())

    @property
    def has_throughputs(self) -> bool:
        return self.memory_pct is not None and self.compute_pct is not None


# Names a profile summary may use for each signal (Nsight Compute's Speed Of Light section
# and common spellings of it); the first one present wins.
_PROFILE_KEYS = {
    "memory_pct": ("memory_throughput_pct", "memory_pct", "dram_throughput_pct", "dram_pct",
                   "mem_throughput_pct", "memory_throughput", "dram_throughput"),
    "compute_pct": ("compute_throughput_pct", "sm_throughput_pct", "compute_pct", "sm_pct",
                    "compute_throughput", "sm_throughput"),
    "occupancy_pct": ("achieved_occupancy_pct", "occupancy_pct", "achieved_occupancy",
                      "occupancy"),
    "dram_pct": ("dram_pct", "dram_throughput_pct"),
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
    found: dict[str, Any] = {}
    kernels = source.get("per_kernel", source.get("kernels"))
    if isinstance(kernels, list) and kernels and all(isinstance(k, dict) for k in kernels):
        slowest = max(kernels, key=lambda k: _number(k.get("duration_ns"))
                      or (_number(k.get("duration_us")) or 0.0) * 1e3)
        source = {**source, **slowest}
        found.update(_traffic(kernels))
        if isinstance(slowest.get("kernel"), str):
            found["kernel"] = slowest["kernel"]
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
    stalls = source.get("top_stalls")
    if isinstance(stalls, list):
        found["stalls"] = tuple(str(s["reason"]) for s in stalls
                                if isinstance(s, dict) and s.get("reason"))
    return ProfileSignals(**found)


def _traffic(kernels: list[dict[str, Any]]) -> dict[str, float]:
    """DRAM bytes read and written by the call: each kernel's first launch times its
    launches, where every kernel has both counters."""
    total = 0.0
    for kernel in kernels:
        read, written = _number(kernel.get("dram_read_bytes")), \
            _number(kernel.get("dram_write_bytes"))
        if read is None or written is None:
            return {}
        total += (read + written) * (_number(kernel.get("launches")) or 1)
    return {"dram_bytes": total}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Facts:
    """What is known about one bench case: its place under the roofline, what the benchmark
    saw, the profile's counters (empty unless the profile rung ran on this case), and which
    case the profile ran on (None: no profile)."""

    point: Point
    bench: dict[str, Any] = field(default_factory=dict)
    profile: ProfileSignals = field(default_factory=ProfileSignals)
    profiled_case: str | None = None
    case: str | None = None
    no_profile_why: str = "`--rungs +profile` adds ncu's counters for the worst case"

    @property
    def below(self) -> bool:
        return self.point.verdict == "below"

    @property
    def counters(self) -> bool:
        """Whether the case has the profile's throughputs (it was the case profiled)."""
        return self.below and self.profile.has_throughputs

    @property
    def memory_busier(self) -> bool:
        p = self.profile
        return self.counters and p.memory_pct >= BUSY_PCT and p.memory_pct >= p.compute_pct  # type: ignore[operator]

    @property
    def traffic(self) -> float | None:
        """DRAM bytes moved over the problem's minimum, where both are known."""
        moved = self.profile.dram_bytes
        return moved / self.point.bytes_moved if moved and self.point.bytes_moved else None

    def number(self, key: str) -> float | None:
        return _number(self.bench.get(key))


@dataclass(frozen=True)
class Rule:
    name: str
    claims: frozenset[str]
    when: Callable[[Facts], bool]
    text: Callable[[Facts], str]
    first_try: Callable[[Facts], str] | None = None


def _rule(name: str, claims: str, when: Callable[[Facts], bool], text: Callable[[Facts], str],
          first_try: Callable[[Facts], str] | str | None = None) -> Rule:
    try_first = (lambda f: first_try) if isinstance(first_try, str) else first_try
    return Rule(name, frozenset(claims.split()), when, text, try_first)  # type: ignore[arg-type]


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value is not None else "?"


def _us(value: Any) -> str:
    number = _number(value)
    return f"{number:.3g} us" if number is not None else "?"


def _counters(f: Facts) -> str:
    p = f.profile
    parts = [f"{label} {_pct(value)}" for label, value in (
        ("memory", p.memory_pct), ("compute", p.compute_pct), ("DRAM", p.dram_pct),
        ("occupancy", p.occupancy_pct)) if value is not None]
    if f.traffic is not None:
        parts.append(f"DRAM bytes {f.traffic:.2f}x the minimum")
    said = f"profile of this case (ncu{', ' + p.kernel if p.kernel else ''}): " + \
        ", ".join(parts)
    if p.limiter:
        said += f", limiter {p.limiter}"
    if p.stalls:
        said += f", top stalls {', '.join(p.stalls)}"
    return said


_FEWER_INSTRUCTIONS = ("fewer instructions per element: 16-byte vector loads, less index "
                       "arithmetic, FMA instead of a multiply and an add, no division")
_TENSOR_FED = ("keep the tensor cores fed: larger tiles, deeper software pipelining (more "
               "stages, TMA), and an epilogue that overlaps the next tile")


def _compute_try(f: Facts) -> str:
    """The first thing to try on a compute-bound case, by the ceiling that binds."""
    compute = f.point.compute
    name = compute.name if compute else f.point.precision
    if name == "mufu":
        return ("fewer MUFU operations: exp2 with log2(e) folded into a scale instead of exp, "
                "rsqrt instead of 1/sqrt, a polynomial on the FMA pipe for some of them")
    if name in ("fma", "hfma2", "int", "issue") or f.point.bound == "memory":
        return _FEWER_INSTRUCTIONS  # the pipes bind where the bytes should have
    if compute is None or compute.assumed:
        return ("climb the artifacts rung too, so that the SASS says which pipes bind (the "
                "tensor cores, or the FMA, MUFU or issue limits)")
    return _TENSOR_FED


def _counted_compute(f: Facts) -> str:
    p = f.profile
    if f.point.bound == "memory":
        return (f"the SM's pipes are busier (compute {_pct(p.compute_pct)}) than memory "
                f"({_pct(p.memory_pct)}) although the case's intensity is below the ridge: "
                "the kernels issue more instructions per byte than the problem's flops need "
                "(index math, conversions, masks): issue-bound")
    return (f"compute-bound on {f.point.ceiling_label} (compute {_pct(p.compute_pct)}, "
            f"memory {_pct(p.memory_pct)})")


def _position_memory(f: Facts) -> str:
    where = ""
    if f.point.intensity is not None and f.point.ridge is not None:
        where = f" ({f.point.intensity:.3g} FLOP/B, below the ridge at {f.point.ridge:.3g})"
    return (f"memory-bound by its position{where}, not by counters: likely more bytes moved "
            "than the minimum (re-reads, uncoalesced or narrow loads) or too few loads in "
            "flight (occupancy, no vector loads)")


def _not_profiled(f: Facts) -> str:
    if f.profiled_case is None:
        return f"no profile ({f.no_profile_why})"
    return f"not profiled (the profile rung ran on case {f.profiled_case})"


def _profiled_elsewhere(f: Facts) -> bool:
    return f.below and not f.profile.has_throughputs


RULES: tuple[Rule, ...] = (
    _rule("suspect", "suspect", lambda f: f.point.verdict == "suspect",
          lambda f: f"faster than the roofline allows ({f.point.why_suspect}): the version "
                    "may skip work, or flops()/bytes_moved() overstate it",
          "check that every call does all the work (no results kept across calls, no "
          "skipped elements); if it does, correct the problem's flops()/bytes_moved()"),
    _rule("at_roofline", "at-roofline", lambda f: f.point.verdict == "at-roofline",
          lambda f: f"at {f.point.pct:.0f}% of {f.point.ceiling_label}: a faster version needs "
                    "less work (fewer bytes moved or flops), not a better schedule",
          "stop optimising this case, or cut the work itself (fewer bytes or flops)"),
    _rule("counters", "", lambda f: f.counters, _counters),
    _rule("latency", "latency-bound",
          lambda f: f.counters and f.profile.memory_pct < BUSY_PCT  # type: ignore[operator]
          and f.profile.compute_pct < BUSY_PCT,  # type: ignore[operator]
          lambda f: "latency-bound: neither memory nor compute is busy",
          "more work in flight per SM: more independent loads per thread (unroll, 16-byte "
          "vectors), more warps (occupancy), or deeper pipelining"),
    _rule("counted_compute", "compute-bound",
          lambda f: f.counters and f.profile.compute_pct >= BUSY_PCT  # type: ignore[operator]
          and f.profile.compute_pct > f.profile.memory_pct,  # type: ignore[operator]
          _counted_compute, _compute_try),
    _rule("extra_traffic", "memory-bound extra-traffic",
          lambda f: f.memory_busier and f.traffic is not None and f.traffic > EXTRA_TRAFFIC,
          lambda f: f"memory-bound with extra traffic: DRAM moved {f.traffic:.2f}x the "
                    "minimum bytes (re-reads, uncoalesced or partial-sector access, spills)",
          "read each input byte once: fuse the passes, keep reused data in registers or "
          "shared memory, coalesce the accesses"),
    _rule("l2_served", "memory-bound dram-below-minimum",
          lambda f: f.memory_busier and f.traffic is not None and f.traffic < FEWER_BYTES,
          lambda f: f"memory-bound, yet DRAM moved only {f.traffic:.2f}x the minimum bytes "
                    "(the rest came from the L2): the L2 or L1, not DRAM, is the busy level",
          "cut on-chip traffic (16-byte loads, fewer re-reads through the L1/L2), and bench "
          "with inputs several times the L2's size to see DRAM's limit"),
    _rule("on_chip", "memory-bound not-dram",
          lambda f: f.memory_busier and _minimum_or_unknown(f) and f.profile.dram_pct is not None
          and f.profile.dram_pct < BUSY_PCT,
          lambda f: f"memory-bound on chip: the memory units are busy (memory "
                    f"{_pct(f.profile.memory_pct)}) while DRAM is not "
                    f"({_pct(f.profile.dram_pct)}): L1, shared memory or L2 traffic holds it "
                    "back (uncoalesced or bank-conflicted access, many small loads)",
          "16-byte coalesced loads; pad or swizzle shared memory against bank conflicts"),
    _rule("dram_busy", "memory-bound dram-busy",
          lambda f: f.memory_busier and _minimum_or_unknown(f) and f.profile.dram_pct is not None
          and f.profile.dram_pct >= BUSY_PCT,
          lambda f: f"memory-bound on DRAM (DRAM {_pct(f.profile.dram_pct)}"
                    + (", the minimum bytes)" if f.traffic is not None else ")")
                    + ": what is left is how DRAM is kept busy (ramp-up and the last wave, "
                      "bytes in flight)",
          "more bytes in flight for the whole run: larger blocks per program, a persistent "
          "grid with no tail wave, several loads issued before the first use"),
    _rule("counted_memory", "memory-bound",
          lambda f: f.memory_busier and _minimum_or_unknown(f) and f.profile.dram_pct is None,
          lambda f: f"memory-bound by the counters (memory {_pct(f.profile.memory_pct)} of its "
                    f"peak, compute {_pct(f.profile.compute_pct)}); ncu's DRAM throughput is "
                    "not in this profile",
          "16-byte coalesced loads, each input read once, several loads in flight per thread"),
    _rule("position_memory", "memory-bound",
          lambda f: _profiled_elsewhere(f) and f.point.bound == "memory", _position_memory,
          "16-byte coalesced loads, each input read once, several loads in flight per thread"),
    _rule("position_compute", "compute-bound",
          lambda f: _profiled_elsewhere(f) and f.point.bound == "compute",
          lambda f: f"compute-bound by its position on {f.point.ceiling_label}, not by "
                    "counters: the pipes idle part of the time (tile shape, pipelining, "
                    "occupancy, epilogue)", _compute_try),
    _rule("not_profiled", "", _profiled_elsewhere, _not_profiled),
    _rule("small_work", "small-work",
          lambda f: f.below and f.point.roofline_us < SMALL_WORK_US,
          lambda f: f"little work: {f.point.roofline_us:.2g} us at the roofline, so launch "
                    "and ramp-up latency are much of it",
          "do more per launch: fewer, fatter programs, and no work split over launches"),
    _rule("launch_bound", "launch-bound", lambda f: f.below and bool(f.bench.get("launch_bound")),
          lambda f: f"launch-bound: {_us(f.bench.get('host_median_us'))} host-visible against "
                    f"{_us(f.bench.get('median_us'))} on the device",
          "fewer launches per call, or capture the call in a CUDA graph"),
    _rule("several_kernels", "several-kernels",
          lambda f: f.below and (f.number("kernels_per_call") or 0) >= 1.5,
          lambda f: f"{f.number('kernels_per_call'):g} kernels per call: intermediate "
                    "results go through memory between them",
          "fuse the kernels into one, so intermediates stay on chip"),
    _rule("no_peak", "no-peak", lambda f: f.below and f.point.ridge is None
          and not (f.point.compute is not None and f.point.compute.bytes_per_s),
          lambda f: f"no {f.point.compute.name if f.point.compute else f.point.precision} "
                    "peak was measured, so only the memory ceiling is known"),
    _rule("assumed_ceiling", "", lambda f: f.below and f.point.compute is not None
          and f.point.compute.assumed,
          lambda f: f"compute ceiling from {f.point.compute.chosen_by}"),  # type: ignore[union-attr]
    _rule("clock_warning", "clock", lambda f: f.below and bool(f.bench.get("clock_warning")),
          lambda f: f"{f.bench['clock_warning']}: part of the gap may be the clock's"),
    _rule("slow_clock", "clock", lambda f: f.below and f.point.bound == "compute"
          and _slow(f),
          lambda f: f"the samples ran at {f.number('sm_mhz_timed'):.0f} MHz, "
                    f"{1 - f.number('sm_mhz_timed') / f.number('sm_max_mhz'):.0%} under the "  # type: ignore[operator]
                    f"top clock ({f.number('sm_max_mhz'):.0f} MHz): compute-bound time grows "
                    "as the clock drops (median_us_at_max_clock is the time at the top)"),
    _rule("power_capped", "power", lambda f: f.below and f.point.bound == "compute"
          and bool(f.bench.get("power_capped")),
          lambda f: "the GPU was at its power limit (sw_power_cap): sustained heavy math runs "
                    "at a lower clock than the short-run peak, so part of the gap is power"),
)
# Claims never made together.
CONTRADICTIONS = (
    ("memory-bound", "compute-bound"), ("memory-bound", "latency-bound"),
    ("compute-bound", "latency-bound"), ("extra-traffic", "dram-below-minimum"),
    ("not-dram", "dram-busy"), ("extra-traffic", "dram-busy"), ("extra-traffic", "not-dram"),
    ("dram-below-minimum", "dram-busy"), ("dram-below-minimum", "not-dram"),
    *((tag, other) for tag in ("at-roofline", "suspect") for other in (
        "memory-bound", "compute-bound", "latency-bound", "launch-bound", "small-work",
        "several-kernels", "extra-traffic", "dram-below-minimum", "not-dram", "dram-busy",
        "clock", "power", "no-peak")),
    ("at-roofline", "suspect"),
)
# Of the rules that fired, whose first step is the most pressing: suspicion and the
# roofline first, then launches and fusion (they change what the counters measure), then
# the counters' diagnosis, then the position's, then the size of the work.
FIRST_TRY_ORDER = ("suspect", "at_roofline", "launch_bound", "several_kernels", "latency",
                   "counted_compute", "extra_traffic", "l2_served", "on_chip", "dram_busy",
                   "counted_memory", "position_memory", "position_compute", "small_work")


def _minimum_or_unknown(f: Facts) -> bool:
    return f.traffic is None or FEWER_BYTES <= f.traffic <= EXTRA_TRAFFIC


def _slow(f: Facts) -> bool:
    timed, top = f.number("sm_mhz_timed"), f.number("sm_max_mhz")
    return bool(timed and top and timed < SLOW_CLOCK * top)


@dataclass(frozen=True)
class Limiter:
    text: str
    rules: tuple[str, ...]  # the rules that fired, in table order
    first_try: str | None  # the first thing to try, from the most pressing rule

    def to_json(self) -> dict[str, Any]:
        return {"limiter": self.text, "limiter_rules": list(self.rules),
                "first_try": self.first_try}


def fired(facts: Facts) -> list[Rule]:
    """Every rule whose condition holds, in table order."""
    return [rule for rule in RULES if rule.when(facts)]


def contradictions(rules: list[Rule]) -> list[tuple[str, str]]:
    """The pairs of CONTRADICTIONS that these rules claim together (none, by design)."""
    claims = set().union(*(rule.claims for rule in rules)) if rules else set()
    return [(a, b) for a, b in CONTRADICTIONS if a in claims and b in claims]


def likely_limiter(facts: Facts) -> Limiter:
    """The case's limiter: how far it is from which ceiling, every rule that fired, and
    (below the roofline) the first thing to try."""
    rules = fired(facts)
    point = facts.point
    texts = [rule.text(facts) for rule in rules]
    if point.verdict == "below":
        texts.insert(0, f"{point.pct:.0f}% of {point.ceiling_label}, {point.headroom:.2g}x "
                        "from the roofline")
    by_name = {rule.name: rule for rule in rules}
    first = next((by_name[name] for name in FIRST_TRY_ORDER if name in by_name
                  and by_name[name].first_try), None)
    first_try = first.first_try(facts) if first and first.first_try else None
    if first_try and point.verdict == "below":
        texts.append(f"first try: {first_try}")
    return Limiter("; ".join(texts), tuple(by_name), first_try)
