"""Two runs' kernels side by side: the deltas of each kernel's figures (registers, shared
memory, spills, occupancy, instruction mix) and the diff of its SASS or PTX.

Kernels pair up by name and function; of several specialisations, the same name pairs first
and the rest in order. SASS is compared without addresses and PTX without comments and
`.loc` lines, so the diff shows what changed in the code, not where it moved. SASS keeps its
guard predicates (`@!P2 LDG.E ...`): a mask or a tail that changed shows there first.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from krung.judge.rungs.artifacts import sass
from krung.protocol import results

MAX_ASM_DIFF_LINES = 300
FIGURES = ("registers", "static_smem_bytes", "dynamic_smem_bytes", "stack_bytes",
           "spill_store_bytes", "spill_load_bytes", "threads_per_block", "occupancy",
           "blocks_per_sm", "warps_by_registers")
# One SASS instruction: its address comment, then the instruction with its guard, to the `;`.
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?P<code>[^;]*?)\s*;", re.IGNORECASE)
MIX = ("instructions", "tensor_core_total", "tma_total", "local_loads", "local_stores", "ffma",
       "mufu", "lds", "sts", "ldgsts", "ldsm", "bar", "syncs")


def kernel_diffs(a: results.Run, b: results.Run, folders: tuple[Path, Path],
                 kinds: tuple[str, ...], kernel: str | None, context: int) -> list[dict]:
    rows_a, rows_b = _rows(a, kernel), _rows(b, kernel)
    pairs, only_a, only_b = _pair(rows_a, rows_b)
    found = []
    for row_a, row_b in pairs:
        entry: dict[str, Any] = {"kernel": row_a["kernel"], "function": row_a.get("function"),
                                 "a": row_a.get("specialisation"),
                                 "b": row_b.get("specialisation"),
                                 "figures": _deltas(_flat(row_a), _flat(row_b))}
        for kind in kinds:
            text = _asm_diff(row_a, row_b, folders, kind, context)
            if text is not None:
                entry[f"{kind}_diff"] = text
        found.append(entry)
    found += [{"kernel": r["kernel"], "function": r.get("function"), "only_in": a.run_id,
               "a": r.get("specialisation")} for r in only_a]
    found += [{"kernel": r["kernel"], "function": r.get("function"), "only_in": b.run_id,
               "b": r.get("specialisation")} for r in only_b]
    return found


def _rows(run: results.Run, kernel: str | None) -> list[dict[str, Any]]:
    rung = run.rung("artifacts")
    rows = [r for r in (rung.figures.get("per_kernel") or []) if not r.get("error")] \
        if rung else []
    if kernel:
        rows = [r for r in rows if kernel.lower() in f"{r['kernel']} {r.get('function')}".lower()]
    return rows


def _pair(rows_a: list[dict], rows_b: list[dict]) -> tuple[list, list, list]:
    def key(row: dict) -> tuple:
        return row["kernel"], row.get("function")

    pairs = []
    left_b = list(rows_b)
    left_a = []
    for row in rows_a:  # the same specialisation first
        match = next((r for r in left_b if key(r) == key(row)
                      and r.get("specialisation") == row.get("specialisation")), None)
        if match is not None:
            pairs.append((row, match))
            left_b.remove(match)
        else:
            left_a.append(row)
    only_a = []
    for row in left_a:  # then any specialisation of the same kernel, in order
        match = next((r for r in left_b if key(r) == key(row)), None)
        if match is not None:
            pairs.append((row, match))
            left_b.remove(match)
        else:
            only_a.append(row)
    return pairs, only_a, left_b


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    flat = {k: row.get(k) for k in FIGURES}
    mix = row.get("sass") or {}
    flat.update({k: mix.get(k, 0) for k in MIX if mix})
    for kind in ("ldg", "stg"):
        for bits, count in (mix.get(kind) or {}).items():
            flat[f"{kind}.{bits}"] = count
    for op, count in (mix.get("tensor_core") or {}).items():
        flat[op] = count
    return flat


def _deltas(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    deltas = {}
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key), b.get(key)
        if key.startswith(("ldg.", "stg.")) or key.isupper():  # a count absent means zero
            x, y = x or 0, y or 0
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and \
                not isinstance(x, bool) and not isinstance(y, bool):
            pair: dict[str, Any] = {"a": x, "b": y, "delta": y - x}
            if x:
                pair["ratio"] = y / x
            deltas[key] = pair
    return deltas


def _asm_diff(row_a: dict, row_b: dict, folders: tuple[Path, Path], kind: str,
              context: int) -> str | None:
    texts = []
    for row, folder in ((row_a, folders[0]), (row_b, folders[1])):
        name = (row.get("files") or {}).get(kind)
        path = folder / name if name else None
        if path is None or not path.is_file():
            return None
        texts.append(_normalise(path.read_text(errors="replace"), kind, row.get("symbol")))
    lines = list(difflib.unified_diff(texts[0], texts[1], fromfile=f"a/{row_a['kernel']}."
                                      f"{kind}", tofile=f"b/{row_b['kernel']}.{kind}",
                                      n=max(context, 0), lineterm=""))
    if len(lines) > MAX_ASM_DIFF_LINES:
        lines = [*lines[:MAX_ASM_DIFF_LINES],
                 f"... ({len(lines) - MAX_ASM_DIFF_LINES} more lines)"]
    return "\n".join(lines) + ("\n" if lines else "")


def _normalise(text: str, kind: str, symbol: str | None) -> list[str]:
    if kind == "sass":
        sections = sass.split_functions(text)
        chosen = sections.get(symbol or "", text) if sections else text
        return sass_lines(chosen)
    if kind == "ptx":
        lines = [re.sub(r"//.*", "", line).rstrip() for line in text.splitlines()]
        return [line for line in lines if line.strip() and not line.strip().startswith(".loc")]
    return text.splitlines()


def sass_lines(text: str) -> list[str]:
    """The instructions as lines without their addresses, each with its guard predicate
    (`@!P2 LDG.E R4, desc[UR4][R2.64]`), spaces collapsed."""
    found = []
    for line in text.splitlines():
        match = _SASS_LINE.match(line)
        if match:
            found.append(" ".join(match.group("code").split()))
    return found
