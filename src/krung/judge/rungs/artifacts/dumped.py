"""Kernels a DSL's own compiler wrote out while the version ran: CuTeDSL keeps the PTX and
CUBIN of every kernel it compiles when told to (CUTE_DSL_KEEP_PTX, CUTE_DSL_KEEP_CUBIN, into
CUTE_DSL_DUMP_DIR). The worker is started with those set (`dump_env`), and the artifacts rung
turns what landed there into the same records as the other backends (`collect`), so SASS,
resources and figures come from krung.judge.rungs.artifacts.inspect as for every DSL. Files only: the
version's code is not imported again.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from krung.judge.rungs.artifacts.target import Target

DUMP_FOLDER = "dumps"


def dump_dir(run_dir: Path, dsl: str) -> Path:
    return run_dir / DUMP_FOLDER / dsl


def dump_env(run_dir: Path) -> dict[str, str]:
    """What makes the DSLs that can keep their kernels do so, under the run's folder."""
    cutedsl = dump_dir(run_dir, "cutedsl")
    cutedsl.mkdir(parents=True, exist_ok=True)  # CuTeDSL keeps nothing in a missing folder
    return {"CUTE_DSL_KEEP_PTX": "1", "CUTE_DSL_KEEP_CUBIN": "1",
            "CUTE_DSL_DUMP_DIR": str(cutedsl)}


def collect(source: Path, out_dir: Path, dsl: str, target: Target) -> list[dict[str, Any]]:
    """One record per dumped CUBIN (with the PTX of the same stem where there is one), its
    files copied to `out_dir/<kernel>/<arch>.<stage>`."""
    records = []
    for cubin in sorted(source.rglob("*.cubin")) if source.is_dir() else []:
        kernel = _kernel_name(cubin.stem)
        folder = out_dir / kernel
        folder.mkdir(parents=True, exist_ok=True)
        stem = target.arch
        shutil.copyfile(cubin, folder / f"{stem}.cubin")
        files = {"cubin": f"{stem}.cubin"}
        ptx = cubin.with_suffix(".ptx")
        if ptx.is_file():  # CuTeDSL's PTX can carry NUL bytes at its end: ptxas refuses them
            (folder / f"{stem}.ptx").write_bytes(ptx.read_bytes().replace(b"\0", b""))
            files["ptx"] = f"{stem}.ptx"
        records.append({"kernel": kernel, "dsl": dsl, "specialisation": stem, "files": files,
                        "target": f"cuda:{target.capability}"})
    return records


def _kernel_name(stem: str) -> str:
    """A folder name from a dumped file's stem (letters, digits, `_`, `.`, `-`), less the
    arch CuTeDSL 4.8 ends it with (`<function>.sm_90a`): the arch names the files inside."""
    stem = re.sub(r"\.sm_\d+[af]?$", "", stem)
    return re.sub(r"[^\w.-]", "_", stem)[:120] or "kernel"
