"""What a kernel holds while it runs (registers, shared memory, stack) and the occupancy
that allows.

Two sources: `cuobjdump -res-usage` reads the cubin itself (REG, SHARED, STACK, LOCAL per
function); `ptxas -v` adds spill stores and loads in bytes. Occupancy is the theoretical
limit from those resources, as the CUDA occupancy calculator computes it, for the limits of
the target (Hopper, sm_90: 65536 registers, 228 KiB shared memory, 64 warps and 32 blocks
per SM; 1 KiB of shared memory reserved per block).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SmLimits:
    registers: int = 65536
    max_registers_per_thread: int = 255
    register_unit: int = 256  # registers are allocated per warp in units of this many
    warp_unit: int = 4  # ... and warps in groups of this many
    smem_bytes: int = 233472  # 228 KiB per SM
    smem_per_block_bytes: int = 232448  # 227 KiB usable by one block
    smem_reserved_per_block: int = 1024
    smem_unit: int = 128
    warps: int = 64
    blocks: int = 32


# Compute capability -> per-SM limits (the CUDA programming guide's table).
LIMITS = {
    90: SmLimits(),
    100: SmLimits(),
    89: SmLimits(smem_bytes=102400, smem_per_block_bytes=101376, warps=48, blocks=24),
    80: SmLimits(smem_bytes=167936, smem_per_block_bytes=166912, warps=64, blocks=32),
    86: SmLimits(smem_bytes=102400, smem_per_block_bytes=101376, warps=48, blocks=16),
}

_RES_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_RES_FIELDS = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")
_PTXAS_ENTRY = re.compile(r"Compiling entry function '?([^'\s]+)'?")
_PTXAS_PROPERTIES = re.compile(r"Function properties for '?([^'\s]+)'?")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes "
                          r"spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage` -> {function: {registers, static_smem_bytes, stack_bytes,
    local_bytes, constant_bytes}}."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = _RES_FUNCTION.match(line)
        if match:
            current = match.group(1)
            continue
        if current and "REG:" in line:
            fields = dict((k, int(v)) for k, v in _RES_FIELDS.findall(line))
            found[current] = {
                "registers": fields.get("REG", 0),
                "static_smem_bytes": fields.get("SHARED", 0),
                "stack_bytes": fields.get("STACK", 0),
                "local_bytes": fields.get("LOCAL", 0),
                "constant_bytes": fields.get("CONSTANT[0]", 0),
            }
            current = None
    return found


def parse_ptxas(text: str) -> dict[str, dict[str, int]]:
    """`ptxas -v` output -> {function: {registers, stack_bytes, spill_store_bytes,
    spill_load_bytes, static_smem_bytes, barriers}}, for entry functions (kernels) only:
    ptxas also prints "Function properties" for a `__noinline__` device function, which
    is not a kernel."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        entry = _PTXAS_ENTRY.search(line)
        if entry:
            current = entry.group(1)
            found.setdefault(current, {})
            continue
        properties = _PTXAS_PROPERTIES.search(line)
        if properties:  # an entry's own properties, or a device function's (skipped)
            current = properties.group(1) if properties.group(1) in found else None
            continue
        if current is None:
            continue
        frame = _PTXAS_FRAME.search(line)
        if frame:
            found[current].update(stack_bytes=int(frame.group(1)),
                                  spill_store_bytes=int(frame.group(2)),
                                  spill_load_bytes=int(frame.group(3)))
        used = _PTXAS_USED.search(line)
        if used:
            found[current]["registers"] = int(used.group(1))
            smem = _PTXAS_SMEM.search(line)
            found[current]["static_smem_bytes"] = int(smem.group(1)) if smem else 0
            barriers = _PTXAS_BARRIERS.search(line)
            if barriers:
                found[current]["barriers"] = int(barriers.group(1))
    return found


def occupancy(registers: int, threads_per_block: int | None, smem_per_block: int,
              capability: int = 90) -> dict[str, Any]:
    """The most blocks and warps one SM can hold with these resources, and which limit
    binds. Without a block size (a CUDA kernel launched from C++), only the register limit
    on warps per SM."""
    limits = LIMITS.get(capability, SmLimits())
    regs_per_warp = _round_up(max(registers, 1) * 32, limits.register_unit)
    warps_by_regs = _round_down(limits.registers // regs_per_warp, limits.warp_unit)
    result: dict[str, Any] = {"warps_by_registers": min(warps_by_regs, limits.warps)}
    if not threads_per_block:
        return result
    warps = math.ceil(threads_per_block / 32)
    smem = _round_up(smem_per_block + limits.smem_reserved_per_block, limits.smem_unit)
    by = {
        "warps": limits.warps // warps,
        "blocks": limits.blocks,
        "registers": warps_by_regs // warps if registers <= limits.max_registers_per_thread
        else 0,
        "shared_memory": limits.smem_bytes // smem
        if smem_per_block <= limits.smem_per_block_bytes else 0,
    }
    blocks = min(by.values())
    binding = [name for name, value in by.items() if value == blocks]
    result.update(blocks_per_sm=blocks, warps_per_sm=blocks * warps,
                  occupancy=round(blocks * warps / limits.warps, 4),
                  limited_by="+".join(binding), limits=by)
    return result


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _round_down(value: int, unit: int) -> int:
    return value // unit * unit
