"""From a kernel's files to its figures; the same for every DSL, from the files alone.

For each compiled specialisation (a `.cubin`, usually with its `.ptx`): the SASS
(`cuobjdump -sass`, kept as `.sass` without encodings), the resources the cubin declares
(`cuobjdump -res-usage`), ptxas's report (`ptxas -v` on the PTX, kept as `.ptxas`, for spill
bytes), the block size where it is known (Triton's num_warps, a literal block size at the
kernel's launch in CUDA C++, or else PTX `.reqntid`/`.maxntid`, an upper bound),
and from all of them one row of figures per function. Runs in the judge: only tools and text
parsers, never the version's code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from krung.judge.rungs.artifacts import resources, sass, tools

_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_PTX_NTID = re.compile(r"\.(maxntid|reqntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")


def inspect(record: dict[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    """Figure rows (one per function) for one record written by a backend; files it makes
    are added to the record's `files`."""
    folder = out_dir / record["kernel"]
    files = record.setdefault("files", {})
    stem = record.get("specialisation") or "-"
    base = {"kernel": record["kernel"], "specialisation": stem, "dsl": record.get("dsl"),
            "launches": record.get("launches")}
    if record.get("error"):
        return [{**base, "error": record["error"],
                 "error_kind": record.get("error_kind", "compile"),
                 **{k: record[k] for k in ("location", "details") if record.get(k)}}]
    cubin = folder / files["cubin"] if "cubin" in files else None
    if cubin is None or not cubin.is_file():
        return [{**base, "error": "no cubin was produced"}]
    notes: list[str] = []
    capability = int(str(record.get("target", "cuda:90")).rsplit(":", 1)[-1])
    sass_text = _sass(cubin, folder / f"{stem}.sass", notes)
    if sass_text is not None:
        files["sass"] = f"{stem}.sass"
    usage = _res_usage(cubin, notes)
    ptx_path = folder / files["ptx"] if "ptx" in files else None
    report_path = folder / f"{stem}.ptxas"
    if not report_path.is_file() and ptx_path is not None:
        _ptxas_report(record, ptx_path, report_path, capability, notes)
    if report_path.is_file():
        files["ptxas"] = report_path.name
    report = resources.parse_ptxas(report_path.read_text()) if report_path.is_file() else {}
    ntid = _ptx_block_sizes(ptx_path.read_text()) if ptx_path is not None else {}
    per_function = sass.split_functions(sass_text) if sass_text else {}
    symbols = list(dict.fromkeys([*usage, *report, *per_function]))
    readable = tools.demangle(symbols)
    rows = []
    for symbol in symbols:
        row: dict[str, Any] = {**base, "function": tools.short_name(readable[symbol]),
                               "symbol": symbol}
        row.update(report.get(symbol, {}))
        row.update(usage.get(symbol, {}))  # the cubin's own figures win over the report's,
        if "static_smem_bytes" in report.get(symbol, {}):  # but its SHARED counts the 1 KiB
            row["static_smem_bytes"] = report[symbol]["static_smem_bytes"]  # reserved too
        dynamic = record.get("shared") if record.get("dsl") == "triton" else None
        row["dynamic_smem_bytes"] = dynamic
        threads = (record.get("threads_per_block")
                   or (record.get("block_sizes") or {}).get(row["function"])
                   or ntid.get(symbol))
        row["threads_per_block"] = threads
        found = sass.mix(per_function[symbol]) if symbol in per_function else {}
        # Spills are what ptxas says it spilled; local memory traffic (LDL/STL) also comes
        # from per-thread arrays, so it is a figure of its own, not a spill.
        row["spills"] = (row["spill_store_bytes"] + row["spill_load_bytes"] > 0
                         if "spill_store_bytes" in row else None)
        if found:
            row["local_ops"] = found.get("local_loads", 0) + found.get("local_stores", 0)
        row.update(resources.occupancy(row.get("registers", 0), threads,
                                       row.get("static_smem_bytes", 0) + (dynamic or 0),
                                       capability))
        if found:
            row["sass"] = found
            row["highlights"] = sass.highlights(found)
        rows.append(row)
    said = [*record.get("notes", []), *notes]  # the backend's notes, then the tools'
    if said:
        for row in rows or [base]:
            row["notes"] = said
    (folder / f"{stem}.figures.json").write_text(json.dumps(rows, indent=1, default=str))
    return rows or [{**base, "error": "; ".join(notes) or "no function found in the cubin"}]


def _sass(cubin: Path, target: Path, notes: list[str]) -> str | None:
    tool = tools.find("cuobjdump")
    if tool is None:
        notes.append("no cuobjdump (CUDA toolkit or Triton's package): no SASS")
        return None
    try:
        text = sass.clean(tools.run(tool, ["-sass", str(cubin)]).stdout)
    except tools.ToolFailed as exc:
        notes.append(str(exc))
        return None
    target.write_text(text)
    return text


def _res_usage(cubin: Path, notes: list[str]) -> dict[str, dict[str, int]]:
    tool = tools.find("cuobjdump")
    if tool is None:
        return {}
    try:
        return resources.parse_res_usage(tools.run(tool, ["-res-usage", str(cubin)]).stdout)
    except tools.ToolFailed as exc:
        notes.append(str(exc))
        return {}


def _ptxas_report(record: dict[str, Any], ptx: Path, target: Path, capability: int,
                  notes: list[str]) -> None:
    """ptxas -v on the PTX, with the ptxas that built the cubin where known."""
    chosen = record.get("ptxas")
    tool = tools.Tool("ptxas", chosen, None) if chosen and Path(chosen).is_file() \
        else tools.find("ptxas")
    if tool is None:
        notes.append("no ptxas: no spill report")
        return
    arch = f"sm_{capability}{'a' if capability >= 90 else ''}"
    try:
        done = tools.run(tool, ["-v", f"-arch={arch}", str(ptx), "-o", "/dev/null"])
    except tools.ToolFailed as exc:
        notes.append(str(exc))
        return
    target.write_text(done.stderr + done.stdout)


def _ptx_block_sizes(ptx: str) -> dict[str, int]:
    """Threads per block an entry declares (`.maxntid` or `.reqntid`), where it does."""
    sizes = {}
    for match in _PTX_ENTRY.finditer(ptx):
        tail = ptx[match.end():match.end() + 4000]
        body = tail.split("{", 1)[0]
        ntid = _PTX_NTID.search(body)
        if ntid:
            dims = [int(d) for d in ntid.groups()[1:] if d]
            total = 1
            for d in dims:
                total *= d
            sizes[match.group(1)] = total
    return sizes
