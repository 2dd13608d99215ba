"""SASS as text, and what its instruction mix says.

The text comes from `cuobjdump -sass` (one `Function : name` section per kernel). The file
krung keeps drops the encodings, so it reads and diffs as code: `/*0070*/  LDG.E.128 R4, ...;`.
The mix counts opcodes and picks out what explains a kernel's speed on Hopper: tensor-core
instructions (HGMMA is warpgroup MMA, HMMA the older warp MMA), FFMA, the width of global
loads and stores (LDG.E.128 moves 16 bytes a thread), local memory (LDL/STL: spills),
shared memory, TMA and bulk copies (UTMALDG, UBLKCP), cp.async (LDGSTS) and barriers.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(
    r"^\s*/\*(?P<address>[0-9a-f]{4,})\*/\s+(?P<guard>@!?U?P[T0-9]+\s+)?"
    r"(?P<op>[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)(?P<operands>[^;]*);", re.IGNORECASE)
_ENCODING = re.compile(r"\s*/\*\s*0x[0-9a-f]{16}\s*\*/", re.IGNORECASE)

TENSOR_CORE = ("HGMMA", "HMMA", "IMMA", "QGMMA", "IGMMA", "BGMMA", "DMMA", "UTCHMMA",
               "UTCQMMA", "UTCIMMA", "UTCOMMA")
TMA = ("UTMALDG", "UTMASTG", "UTMAPF", "UTMAREDG", "UBLKCP", "UBLKRED", "UBLKPF")
ARITHMETIC = ("FFMA", "FMUL", "FADD", "HFMA2", "HMUL2", "HADD2", "DFMA", "MUFU", "IMAD")
MEMORY = ("LDS", "STS", "LDSM", "STSM", "LDGSTS", "LDL", "STL", "ATOM", "ATOMG", "ATOMS",
          "RED", "REDG", "SHFL", "LDC")
SYNC = ("BAR", "SYNCS", "WARPGROUP", "MEMBAR", "DEPBAR", "WARPSYNC")


def clean(text: str) -> str:
    """cuobjdump's SASS without the hex encodings and their continuation lines."""
    lines = []
    for line in text.splitlines():
        stripped = _ENCODING.sub("", line).rstrip()
        if stripped.strip():
            lines.append(stripped)
        elif not line.strip():
            lines.append("")
    return "\n".join(lines).strip("\n") + "\n"


def split_functions(text: str) -> dict[str, str]:
    """SASS text per function (mangled name), in file order."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _FUNCTION.match(line)
        if match:
            current = sections.setdefault(match.group(1), [])
        if current is not None:
            current.append(line)
    return {name: "\n".join(lines) + "\n" for name, lines in sections.items()}


def instructions(text: str) -> list[tuple[str, str]]:
    """(opcode with modifiers, operands) of every instruction, in order."""
    found = []
    for line in text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            found.append((match.group("op").upper(), match.group("operands").strip()))
    return found


def without_addresses(text: str) -> list[str]:
    """The instructions as lines without their addresses: what a diff of two kernels compares."""
    return [f"{op} {operands}".rstrip() for op, operands in instructions(text)]


def width_bits(op: str) -> int:
    """Bits a thread moves in one LDG/STG/LDS/STS: from the modifiers, 32 when none says."""
    modifiers = op.split(".")[1:]
    for modifier in modifiers:
        if modifier in ("128", "64", "32", "16", "8"):
            return int(modifier)
        if modifier in ("U8", "S8"):
            return 8
        if modifier in ("U16", "S16"):
            return 16
    return 32


def mix(text: str) -> dict[str, Any]:
    """The instruction mix of one function's SASS (or of a whole file)."""
    ops = instructions(text)
    base = Counter("MOV" if _is_move(op, operands) else op.split(".")[0]
                   for op, operands in ops)
    widths: dict[str, Counter] = {"LDG": Counter(), "STG": Counter()}
    for op, _ in ops:
        head = op.split(".")[0]
        if head in widths:
            widths[head][width_bits(op)] += 1
    result: dict[str, Any] = {
        "instructions": sum(n for op, n in base.items() if op != "NOP"),
        "tensor_core": {op: base[op] for op in TENSOR_CORE if base[op]},
        "tensor_core_total": sum(base[op] for op in TENSOR_CORE),
        "ldg": dict(sorted((str(k), v) for k, v in widths["LDG"].items())),
        "stg": dict(sorted((str(k), v) for k, v in widths["STG"].items())),
        "tma": {op: base[op] for op in TMA if base[op]},
        "tma_total": sum(base[op] for op in TMA),
        "local_loads": base["LDL"],
        "local_stores": base["STL"],
    }
    for group in (ARITHMETIC, MEMORY, SYNC):
        for op in group:
            if base[op]:
                result[op.lower()] = base[op]
    return result


_MOVE_BY_FMA = re.compile(r"\s*\w+\s*,\s*-RZ\s*,\s*RZ\s*,")


def _is_move(op: str, operands: str) -> bool:
    """`HFMA2.MMA R5, -RZ, RZ, 0, 0` (or with a constant): ptxas's idiom to load a constant
    into a register on the tensor-pipe FMA, a move and not arithmetic."""
    return op.startswith("HFMA2") and bool(_MOVE_BY_FMA.match(operands))


def highlights(found: dict[str, Any]) -> str:
    """One line of the mix for people: `HGMMA x8, FFMA x12, LDG.128 x4, STG.32 x2, BAR x2`."""
    parts = [f"{op} x{n}" for op, n in found.get("tensor_core", {}).items()]
    parts += [f"{op} x{n}" for op, n in found.get("tma", {}).items()]
    for op in ("ffma", "hfma2", "mufu"):
        if found.get(op):
            parts.append(f"{op.upper()} x{found[op]}")
    for kind in ("ldg", "stg"):
        parts += [f"{kind.upper()}.{bits} x{n}" for bits, n in found.get(kind, {}).items()]
    for op in ("ldgsts", "ldsm", "lds", "sts", "bar", "syncs"):
        if found.get(op):
            parts.append(f"{op.upper()} x{found[op]}")
    if found.get("local_loads") or found.get("local_stores"):
        parts.append(f"LDL x{found['local_loads']}, STL x{found['local_stores']} (local memory)")
    return ", ".join(parts)
