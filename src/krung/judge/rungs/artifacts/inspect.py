"""From a kernel's files to its figures; the same for every DSL, from the files alone.

For each compiled specialisation (a `.cubin`, usually with its `.ptx`): the SASS
(`cuobjdump -sass`, kept as `.sass` without encodings), the resources the cubin declares
(`cuobjdump -res-usage`), ptxas's report (`ptxas -v` on the PTX, kept as `.ptxas`, for spill
bytes), the block size where it is known (Triton's num_warps, a literal block size at the
kernel's launch in CUDA C++, or else PTX `.reqntid`/`.maxntid`, an upper bound),
and from all of them one row of figures per function. Runs in the judge: only tools and text
parsers, never the version's code.

The tools take most of the artifacts rung's time (ptxas compiles the PTX again), so the
specialisations are inspected at once (`inspect_all`), and what the tools say of a cubin and
its PTX is kept under the store's build cache, keyed by their bytes: a kernel a later version
left unchanged is not disassembled again (the tools' output depends on those bytes alone).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from krung.judge.rungs.artifacts import resources, sass, tools

_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_PTX_NTID = re.compile(r"\.(maxntid|reqntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")


def inspect_all(records: list[dict[str, Any]], out_dir: Path,
                cache_dir: Path | None = None) -> list[dict[str, Any]]:
    """The rows of every record, in the records' order; the tools run for several at once."""
    if not records:
        return []
    workers = max(1, min(len(records), os.cpu_count() or 1, 8))
    with ThreadPoolExecutor(workers) as pool:
        found = pool.map(lambda record: inspect(record, out_dir, cache_dir), records)
        return [row for rows in found for row in rows]


def inspect(record: dict[str, Any], out_dir: Path,
            cache_dir: Path | None = None) -> list[dict[str, Any]]:
    """Figure rows (one per function) for one record written by a backend; files it makes
    are added to the record's `files`."""
    folder = out_dir / record["kernel"]
    files = record.setdefault("files", {})
    stem = record.get("specialisation") or "-"
    base = {"kernel": record["kernel"], "specialisation": stem, "dsl": record.get("dsl"),
            "launches": record.get("launches"),
            **{k: record[k] for k in ("cases", "ran") if k in record}}
    if record.get("error"):
        return [{**base, "error": record["error"],
                 "error_kind": record.get("error_kind", "compile"),
                 **{k: record[k] for k in ("location", "details") if record.get(k)}}]
    cubin = folder / files["cubin"] if "cubin" in files else None
    if cubin is None or not cubin.is_file():
        return [{**base, "error": "no cubin was produced"}]
    notes: list[str] = []
    capability = int(str(record.get("target", "cuda:90")).rsplit(":", 1)[-1])
    ptx_path = folder / files["ptx"] if "ptx" in files else None
    report_path = folder / f"{stem}.ptxas"
    said = _tool_outputs(record, cubin, None if report_path.is_file() else ptx_path,
                         capability, notes, cache_dir)
    sass_text = said.get("sass")
    if sass_text is not None:
        (folder / f"{stem}.sass").write_text(_cases_header(record) + sass_text)
        files["sass"] = f"{stem}.sass"
    usage = resources.parse_res_usage(said["res_usage"]) if said.get("res_usage") else {}
    if said.get("ptxas") is not None:
        report_path.write_text(said["ptxas"])
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


def _cases_header(record: dict[str, Any]) -> str:
    """Comment lines that say which cases launched the specialisation, where that is known
    (a CPU run); `krung diff` compares functions and leaves them out."""
    if "cases" not in record:
        return ""
    cases = record["cases"] or ["none of the listed cases (a case made while checking)"]
    lines = [f"// krung: {record['kernel']} {record.get('specialisation')}, launched by:"]
    lines += [f"//   {case}" for case in cases]
    if record.get("ran") is False:
        lines.append("// compiled from the launch the version makes on these cases' shapes; "
                     "not run on this machine (no GPU)")
    return "\n".join(lines) + "\n"


_OUTPUTS = ("sass", "res_usage", "ptxas")


def _tool_outputs(record: dict[str, Any], cubin: Path, ptx: Path | None, capability: int,
                  notes: list[str], cache_dir: Path | None) -> dict[str, str | None]:
    """What cuobjdump says of the cubin (its SASS, its resources) and, given `ptx`, what
    ptxas -v says of it: from the cache where these bytes were inspected before, and kept
    there when every tool answered."""
    cuobjdump = tools.find("cuobjdump")
    ptxas = _ptxas_tool(record) if ptx is not None else None
    entry = None
    if cache_dir is not None:
        digest = hashlib.sha256(cubin.read_bytes())
        digest.update(ptx.read_bytes() if ptx is not None else b"")
        digest.update(repr((capability, cuobjdump, ptxas)).encode())
        entry = Path(cache_dir) / "inspect" / digest.hexdigest()[:32]
        if (entry / "said.json").is_file():
            return json.loads((entry / "said.json").read_text())
    said: dict[str, str | None] = dict.fromkeys(_OUTPUTS)
    failed = len(notes)
    if cuobjdump is None:
        notes.append("no cuobjdump (CUDA toolkit or Triton's package): no SASS")
    else:
        said["sass"] = _run(cuobjdump, ["-sass", str(cubin)], notes, sass.clean)
        said["res_usage"] = _run(cuobjdump, ["-res-usage", str(cubin)], notes)
    if ptx is not None:
        if ptxas is None:
            notes.append("no ptxas: no spill report")
        else:
            arch = f"sm_{capability}{'a' if capability >= 90 else ''}"
            said["ptxas"] = _run(ptxas, ["-v", f"-arch={arch}", str(ptx), "-o", "/dev/null"],
                                 notes, both=True)
    if entry is not None and len(notes) == failed:
        entry.mkdir(parents=True, exist_ok=True)
        staging = entry / f".said-{os.getpid()}-{id(said)}"
        staging.write_text(json.dumps(said))
        os.replace(staging, entry / "said.json")  # a concurrent reader sees all or nothing
    return said


def _ptxas_tool(record: dict[str, Any]) -> tools.Tool | None:
    """The ptxas that built the cubin where known, so the report reads like its build."""
    chosen = record.get("ptxas")
    if chosen and Path(chosen).is_file():
        return tools.Tool("ptxas", chosen, None)
    return tools.find("ptxas")


def _run(tool: tools.Tool, args: list[str], notes: list[str], clean: Any = None,
         both: bool = False) -> str | None:
    try:
        done = tools.run(tool, args)
    except tools.ToolFailed as exc:
        notes.append(str(exc))
        return None
    text = done.stderr + done.stdout if both else done.stdout
    return clean(text) if clean else text


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
