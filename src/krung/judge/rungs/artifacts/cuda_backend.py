"""CUDA C++: the version's CUDA sources compiled with nvcc for the target: PTX, CUBIN (with
ptxas's resource report) and, later, SASS.

The sources are caught as the version is imported in the build process: `prepare()` replaces
torch's `load_inline` and `load` and CuPy's `RawKernel`/`RawModule` (NVRTC) with recorders that
keep the CUDA text and flags and return a stand-in, so nothing is built or run and no GPU is
needed. The build process only hands those texts back (`collect`); nvcc runs in the judge
(`compile_all`), where the version's import-time code cannot reach it. Literal sources named
in the file and a `.cu` file beside the version with its name (`v2.py`, `v2.cu`) are found by
the judge itself. Each source is compiled as torch would (its implicit headers and nvcc flags,
torch's include paths, the version's extra flags and include folders):
`nvcc -cubin -Xptxas -v`, keeping the PTX, so ptxas sees the version's own options.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from krung.judge.rungs.artifacts import tools
from krung.judge.rungs.artifacts.target import Target
from krung.protocol import build_cache
from krung.protocol.messages import Build
from krung.worker import cuda_source

# What torch.utils.cpp_extension puts before inline CUDA sources and passes to nvcc.
TORCH_PREAMBLE = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")
TORCH_NVCC_FLAGS = ("-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                    "--expt-relaxed-constexpr", "-std=c++17")
NVCC_TIMEOUT_S = 600.0

_captured: list[dict[str, Any]] = []


class NotBuilt:
    """What a recorded `load_inline` returns: any use says why it cannot run here."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{self._name}.{attr}: the extension is not built while krung "
                               "captures its CUDA sources")

        return refuse


class CudaBackend:
    dsl = "cuda"

    def prepare(self, request: Build) -> None:
        _captured.clear()
        _hook_torch()
        if "cupy" in request.dsls and _importable("cupy"):
            _hook_cupy()

    def collect(self, request: Build, out_dir: Path) -> list[dict[str, Any]]:
        """The sources caught at import, as text: the judge compiles them (`compile_all`)."""
        return [{"kernel": source["name"], "dsl": "cuda", "cuda_source": source}
                for source in _captured]


def compile_all(version: Path, captured: list[dict[str, Any]], target: Target, out_dir: Path,
                cache_dir: str | Path | None = None,
                arch_from_flags: bool = True) -> list[dict[str, Any]]:
    """In the judge: compile every CUDA source of the version (those the build process
    caught, and those the judge finds itself), each for `target` or, with `arch_from_flags`,
    for the architecture its own nvcc flags name (as torch would build it)."""
    return [compile_source(source, (arch_from_flags and _flag_target(source)) or target,
                           out_dir, cache_dir)
            for source in find_sources(version, captured)]


def find_sources(version: Path, captured: list[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Every CUDA source of the version: those caught at import, those named in literal
    form (a load_inline called lazily, inside a function), and a `.cu` beside it with its
    name; each with where its lines sit in the version's files."""
    sources = [*captured, *cuda_source.static_sources(version)]
    beside = version.with_suffix(".cu")
    if beside.is_file():
        sources.append({"name": beside.stem, "code": beside.read_text(errors="replace"),
                        "flags": [], "origin": beside.name, "torch": False,
                        "file": str(beside)})
    text = version.read_text(errors="replace")
    for source in sources:
        source.setdefault("version", str(version))
        if not source.get("file"):
            source["segments"] = cuda_source.segments(text, source.get("pieces")
                                                      or [source["code"]])
    return _unique(sources)


def compile_source(source: dict[str, Any], target: Target, out_dir: Path,
                   cache_dir: str | Path | None = None) -> dict[str, Any]:
    """nvcc to a cubin (with ptxas's report), keeping the PTX; files as
    `<out_dir>/<name>/<arch>.<stage>`. With `cache_dir`, outputs are kept there under a key of
    everything that makes them (source, the headers it includes from its own folders, flags,
    target, tool versions), and a second compile of the same is a copy."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", source["name"])[:100] or "cuda"
    folder = out_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"kernel": name, "dsl": "cuda", "origin": source["origin"],
                              "specialisation": target.arch, "target": f"cuda:{target.capability}",
                              "files": {}}
    for key in ("version", "file", "segments"):
        if source.get(key):
            record[key] = source[key]
    nvcc = tools.find("nvcc")
    ptxas = tools.find("ptxas")
    cu = folder / f"{target.arch}.cu"
    code = source["code"]
    preamble = TORCH_PREAMBLE if source.get("torch") else ()
    code = "\n".join([*preamble, code])
    record["preamble_lines"] = len(preamble)
    cu.write_text(code)
    record["files"]["source"] = cu.name
    record["block_sizes"] = launch_block_sizes(source["code"])
    missing = _missing_tool(nvcc, ptxas)
    if missing:
        record.update(error=missing, error_kind="no_toolkit")
        return record
    assert nvcc is not None and ptxas is not None
    flags = [*(TORCH_NVCC_FLAGS if source.get("torch") else ()), *_include_flags(source),
             *[f for f in source.get("flags", []) if _passable(f)]]
    record["nvcc_flags"] = flags
    record["tools"] = {"nvcc": nvcc.label, "ptxas": ptxas.label}
    stages = {"ptx": f"{target.arch}.ptx", "cubin": f"{target.arch}.cubin",
              "ptxas": f"{target.arch}.ptxas"}
    cached = build_cache.entry(cache_dir, {"code": code, "flags": flags, "arch": target.arch,
                                           "headers": included_headers(code, _own_folders(source)),
                                           "tools": record["tools"],
                                           "torch": _torch_version(source)})
    start = time.perf_counter()
    if cached is not None and build_cache.fetch(cached, folder, stages.values()):
        record["cache"] = "hit"
        record["files"].update(stages)
    else:
        try:
            _nvcc(nvcc, target, flags, cu, folder, stages)
            record["files"].update(stages)
            record["cache"] = "miss" if cached is not None else None
            if cached is not None:
                build_cache.keep(cached, folder, stages.values())
        except tools.ToolFailed as exc:
            record["error"] = str(exc)
            record.update(cuda_source.explain_failure(record, str(exc), str(cu)))
    record["compile_s"] = round(time.perf_counter() - start, 3)
    (folder / f"{target.arch}.json").write_text(_json(record))
    return record


def _missing_tool(nvcc: tools.Tool | None, ptxas: tools.Tool | None) -> str | None:
    if nvcc is None:
        return ("nvcc is not on PATH: the CUDA toolkit is needed to compile CUDA sources (set "
                "CUDA_HOME or put nvcc on PATH)")
    if ptxas is None:
        return (f"nvcc is there ({nvcc.path}) but ptxas is not: the toolkit is incomplete; "
                "install the CUDA toolkit's ptxas (the cuda-nvcc package) beside nvcc")
    return None


def _nvcc(nvcc: tools.Tool, target: Target, flags: list[str], cu: Path, folder: Path,
          stages: dict[str, str]) -> None:
    """One nvcc run to the cubin, with the version's flags (so `--maxrregcount`, `-Xptxas`
    and `--ptxas-options` reach ptxas) and ptxas's report; the PTX it made is kept."""
    with tempfile.TemporaryDirectory(prefix=".nvcc-", dir=folder) as keep:
        done = tools.run(nvcc, ["-cubin", f"-arch={target.arch}", "-Xptxas", "-v", "-keep",
                                f"-keep-dir={keep}", *flags, str(cu),
                                "-o", str(folder / stages["cubin"])], timeout=NVCC_TIMEOUT_S)
        shutil.move(str(Path(keep) / f"{cu.stem}.ptx"), folder / stages["ptx"])
    output = (done.stderr + done.stdout).splitlines()
    first = next((i for i, line in enumerate(output) if line.startswith("ptxas")), len(output))
    (folder / stages["ptxas"]).write_text("\n".join(output[first:]) + "\n")


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)
MAX_HEADERS = 2000


def included_headers(code: str, folders: list[Path]) -> dict[str, str]:
    """The headers `code` includes, directly or not, from the version's own folders (its
    file's folder and its include paths), each with a hash of its text: part of the cache
    key, so editing an included `.cuh` rebuilds. Every `#include` line counts, whatever the
    `#if` around it; headers found elsewhere (the toolkit's, torch's) are keyed by the tool
    and torch versions instead."""
    found: dict[str, str] = {}
    pending: list[tuple[str, Path | None]] = [(code, folders[0] if folders else None)]
    while pending and len(found) < MAX_HEADERS:
        text, here = pending.pop()
        for quote, name in _INCLUDE.findall(text):
            places = [*([here] if quote == '"' and here else []), *folders]
            path = next((p / name for p in places if (p / name).is_file()), None)
            if path is None or str(path.resolve()) in found:
                continue
            data = path.read_bytes()
            found[str(path.resolve())] = hashlib.sha256(data).hexdigest()
            pending.append((data.decode(errors="replace"), path.resolve().parent))
    return dict(sorted(found.items()))


def _own_folders(source: dict[str, Any]) -> list[Path]:
    """The folders a source's quoted includes are looked up in: its file's, then its
    include paths (what `_include_flags` passes as -I, less torch's)."""
    folders = [Path(source["file"]).parent] if source.get("file") else []
    return [*folders, *(Path(p) for p in source.get("includes") or [])]


_ARCH_FLAG = re.compile(r"(?:sm|compute)_(\d{2,3}a?)")


def _flag_target(source: dict[str, Any]) -> Target | None:
    """The architecture the version's own nvcc flags build for (`-arch=sm_90a`,
    `-gencode=arch=compute_90a,code=sm_90a`), the last one named; None where they name none."""
    named = [m for f in source.get("flags", []) if not _passable(f)
             for m in _ARCH_FLAG.findall(f)]
    return Target(f"sm_{named[-1]}") if named else None


def _torch_version(source: dict[str, Any]) -> str | None:
    """torch's headers go into a torch source: their version is part of what it compiles to."""
    if not source.get("torch"):
        return None
    import torch

    return torch.__version__


_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;]*>)?\s*<<<([^;]*?)>>>")
_DIM3 = re.compile(r"dim3\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?\)")


def launch_block_sizes(code: str) -> dict[str, int]:
    """Threads per block of each `kernel<<<grid, block, ...>>>` launch whose block size (the
    second field inside `<<< >>>`) is a literal (`256` or `dim3(16, 16)`): what occupancy
    needs and the cubin does not say. A block size held in a variable gives nothing."""
    sizes: dict[str, int] = {}
    for match in _LAUNCH.finditer(code):
        fields = _top_level_fields(match.group(2))
        threads = _literal_threads(fields[1]) if len(fields) > 1 else None
        if threads is not None:
            sizes.setdefault(match.group(1), threads)
    return sizes


def _top_level_fields(text: str) -> list[str]:
    """`a, dim3(1, 2), 0` -> ["a", "dim3(1, 2)", "0"]: commas inside brackets do not split."""
    fields, depth, current = [], 0, ""
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            fields.append(current.strip())
            current = ""
        else:
            current += char
    return [*fields, current.strip()]


def _literal_threads(field: str) -> int | None:
    if field.isdigit():
        return int(field)
    dims = _DIM3.fullmatch(field)
    if not dims:
        return None
    total = 1
    for d in dims.groups():
        total *= int(d) if d else 1
    return total


def _include_flags(source: dict[str, Any]) -> list[str]:
    """-I for the source's own folder (a `.cu` file's relative includes) and its include
    paths, always; then torch's include paths, for its sources and any that include torch's
    headers."""
    paths = [str(p) for p in _own_folders(source)]
    if source.get("torch") or re.search(r"#\s*include\s*[<\"](torch|ATen|c10)/",
                                        source["code"]):
        from torch.utils.cpp_extension import include_paths

        paths += [*include_paths(), sysconfig.get_paths()["include"]]
    return [f"-I{p}" for p in dict.fromkeys(paths)]


def _passable(flag: str) -> bool:
    """The version's nvcc flags, less those that choose another output or target."""
    return not re.match(r"-(gencode|arch|code|o$|c$|-generate-code|-gpu-architecture)|arch=",
                        flag)


def _unique(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    names: set[str] = set()
    for source in sources:
        key = hashlib.sha256(source["code"].encode()).hexdigest()
        if key in seen:
            continue
        name = source["name"]
        while name in names:
            name += "_"
        names.add(name)
        seen[key] = {**source, "name": name}
    return list(seen.values())


def _hook_torch() -> None:
    from torch.utils import cpp_extension

    def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any,
                    **kwargs: Any) -> Any:
        if cuda_sources:
            pieces = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources)
            _captured.append({"name": name, "code": "\n".join(pieces), "pieces": pieces,
                              "origin": "load_inline",
                              "flags": list(kwargs.get("extra_cuda_cflags") or []),
                              "includes": list(kwargs.get("extra_include_paths") or []),
                              "torch": not kwargs.get("no_implicit_headers", False)})
        return NotBuilt(name)

    def load(name: str, sources: Any, *args: Any, **kwargs: Any) -> Any:
        for path in [sources] if isinstance(sources, str) else sources:
            file = Path(path)
            if file.suffix in (".cu", ".cuh") and file.is_file():
                _captured.append({"name": f"{name}_{file.stem}", "origin": str(file),
                                  "code": file.read_text(errors="replace"), "file": str(file),
                                  "flags": list(kwargs.get("extra_cuda_cflags") or []),
                                  "includes": [str(file.parent),
                                               *(kwargs.get("extra_include_paths") or [])],
                                  "torch": True})
        return NotBuilt(name)

    cpp_extension.load_inline = load_inline
    cpp_extension.load = load


def _hook_cupy() -> None:
    import cupy

    class RawKernel(NotBuilt):
        def __init__(self, code: str, name: str, options: tuple = (), *args: Any,
                     **kwargs: Any):
            super().__init__(name)
            _captured.append({"name": name, "code": code, "origin": "cupy.RawKernel",
                              "flags": list(options), "torch": False})

    class RawModule(NotBuilt):
        def __init__(self, code: str | None = None, *args: Any, options: tuple = (),
                     name_expressions: Any = None, **kwargs: Any):
            super().__init__("RawModule")
            if code:
                _captured.append({"name": "raw_module", "code": code, "origin": "cupy.RawModule",
                                  "flags": list(options), "torch": False})

    cupy.RawKernel = RawKernel
    cupy.RawModule = RawModule


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _json(record: dict[str, Any]) -> str:
    import json

    return json.dumps(record, indent=1, default=str)
