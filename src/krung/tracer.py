"""Time regions inside a Triton kernel: `start(trace, R)` and `stop(trace, R)` at a region's
boundaries read the GPU's global timer (%globaltimer, ns) into a buffer krung gives the
kernel; the `trace` rung turns it into a Chrome/Perfetto trace and per-region times.

In a version:

    import krung.tracer as kt

    @triton.jit
    def my_kernel(x_ptr, y_ptr, n, trace, BLOCK: tl.constexpr):
        kt.start(trace, 0)
        x = tl.load(...)
        kt.stop(trace, 0)
        kt.start(trace, 1)
        ...
        kt.stop(trace, 1)

    def kernel(x):
        grid = (triton.cdiv(n, 1024),)
        my_kernel[grid](x, y, n, kt.buffer(grid, ["load", "math"]), BLOCK=1024)

`buffer()` is None except while the trace rung runs, and with `trace` None the calls are
compiled out (None is a compile-time constant to Triton): the version pays nothing in the
other rungs. One record per program and region: start, stop and the SM that ran it.

Why not Triton's own proton: Triton 3.6 ships proton's intra-kernel instrumentation
(`triton.profiler.language.enter_scope`), but enables it only for Gluon kernels; Triton-DSL
kernels need `enable_semantic("triton")`, which proton warns gives misleading results, and a
proton session around the launch. This tracer needs neither. The same caution applies to it:
the compiler keeps the timer reads in order with other side effects, but a region's stop is
when its instructions were issued, so end a region with a use of what it loaded.
"""

from __future__ import annotations

import math
from typing import Any

import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer, smid

MAX_REGIONS = tl.constexpr(8)
SLOTS = tl.constexpr(4)  # start, stop, SM, unused
NOT_SET = -1

_session: Session | None = None


@triton.jit
def start(trace, region: tl.constexpr):
    """Region `region` (0..7) of this program begins now."""
    if trace is not None:
        _write(trace, region, 0, globaltimer())


@triton.jit
def stop(trace, region: tl.constexpr):
    """Region `region` of this program ends now."""
    if trace is not None:
        _write(trace, region, 1, globaltimer())
        _write(trace, region, 2, smid().to(tl.int64))


@triton.jit
def _write(trace, region: tl.constexpr, slot: tl.constexpr, value):
    program = tl.program_id(0) + tl.num_programs(0) * (
        tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
    offset = (program.to(tl.int64) * MAX_REGIONS + region) * SLOTS + slot
    tl.store(trace + offset, value)


class Session:
    """The buffers handed out while the trace rung runs the version once."""

    def __init__(self, device: str):
        self.device = device
        self.buffers: list[tuple[Any, list[int], list[str], str | None]] = []


def buffer(grid: Any, regions: list[str] | None = None, kernel: str | None = None) -> Any:
    """The trace buffer for one launch with this grid (None when krung is not tracing).
    `regions` names the regions 0, 1, ...; `kernel` names the launch in the trace."""
    if _session is None:
        return None
    import torch

    dims = [int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,))]
    programs = math.prod(dims)
    data = torch.full((programs, MAX_REGIONS.value, SLOTS.value), NOT_SET, dtype=torch.int64,
                      device=_session.device)
    names = list(regions or [])
    _session.buffers.append((data, dims, names, kernel))
    return data


def begin(device: str) -> None:
    global _session
    _session = Session(device)


def end() -> list[dict[str, Any]]:
    """Stop tracing; every launch's records as plain lists (ns), per program and region."""
    global _session
    session, _session = _session, None
    if session is None:
        return []
    launches = []
    for data, grid, names, kernel in session.buffers:
        rows = data.cpu().tolist()
        events = []
        for program, regions in enumerate(rows):
            for region, (begin_ns, end_ns, sm, _) in enumerate(regions):
                if begin_ns != NOT_SET and end_ns != NOT_SET:
                    events.append([program, region, begin_ns, end_ns, sm])
        launches.append({"kernel": kernel, "grid": grid, "regions": names, "events": events})
    return launches
