"""CUDA C++: the version's CUDA sources compiled with nvcc for the target: PTX, CUBIN (with
ptxas's resource report) and, later, SASS.

The sources are caught as the version is imported in the build process: `prepare()` replaces
torch's `load_inline` and `load` and CuPy's `RawKernel`/`RawModule` (NVRTC) with recorders that
keep the CUDA text and flags and return a stand-in, so nothing is built or run and no GPU is
needed. A `.cu` file beside the version with its name (`v2.py`, `v2.cu`) is taken too.
Each source is compiled as torch would (its implicit headers and nvcc flags, torch's include
paths, the version's extra flags): `nvcc -ptx`, then `ptxas -v` to a cubin.
"""

from __future__ import annotations

import hashlib
import re
import sysconfig
import time
from pathlib import Path
from typing import Any

from krung import build_cache, cuda_source
from krung.artifacts import Target, tools

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

    def prepare(self, request: dict[str, Any]) -> None:
        _captured.clear()
        _hook_torch()
        if "cupy" in request.get("dsls", ()) and _importable("cupy"):
            _hook_cupy()

    def collect(self, request: dict[str, Any], out_dir: Path) -> list[dict[str, Any]]:
        return [compile_source(source, Target.parse(request["arch"]), out_dir,
                               request.get("cache_dir"))
                for source in find_sources(Path(request["version"]))]


def find_sources(version: Path) -> list[dict[str, Any]]:
    """Every CUDA source of the version: those caught at import, those named in literal
    form (a load_inline called lazily, inside a function), and a `.cu` beside it with its
    name; each with where its lines sit in the version's files."""
    sources = [*_captured, *cuda_source.static_sources(version)]
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
    """nvcc -ptx, then ptxas -v to a cubin; files as `<out_dir>/<name>/<arch>.<stage>`.
    With `cache_dir`, outputs are kept there under a key of everything that makes them
    (source, flags, target, tool versions), and a second compile of the same is a copy."""
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
    if nvcc is None or ptxas is None:
        record["error"] = ("nvcc is not on PATH: the CUDA toolkit is needed to compile CUDA "
                           "sources (set CUDA_HOME or put nvcc on PATH)")
        return record
    flags = [*(TORCH_NVCC_FLAGS if source.get("torch") else ()), *_include_flags(source),
             *[f for f in source.get("flags", []) if _passable(f)]]
    record["nvcc_flags"] = flags
    record["tools"] = {"nvcc": nvcc.label, "ptxas": ptxas.label}
    stages = {"ptx": f"{target.arch}.ptx", "cubin": f"{target.arch}.cubin",
              "ptxas": f"{target.arch}.ptxas"}
    cached = build_cache.entry(cache_dir, {"code": code, "flags": flags, "arch": target.arch,
                                           "tools": record["tools"],
                                           "torch": _torch_version(source)})
    start = time.perf_counter()
    if cached is not None and build_cache.fetch(cached, folder, stages.values()):
        record["cache"] = "hit"
        record["files"].update(stages)
    else:
        try:
            _nvcc(nvcc, ptxas, target, flags, cu, folder, stages)
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


def _nvcc(nvcc: tools.Tool, ptxas: tools.Tool, target: Target, flags: list[str], cu: Path,
          folder: Path, stages: dict[str, str]) -> None:
    ptx, cubin = folder / stages["ptx"], folder / stages["cubin"]
    tools.run(nvcc, ["-ptx", f"-arch={target.arch}", *flags, str(cu), "-o", str(ptx)],
              timeout=NVCC_TIMEOUT_S)
    report = tools.run(ptxas, ["-v", f"-arch={target.arch}", str(ptx), "-o", str(cubin)])
    (folder / stages["ptxas"]).write_text(report.stderr + report.stdout)


def _torch_version(source: dict[str, Any]) -> str | None:
    """torch's headers go into a torch source: their version is part of what it compiles to."""
    if not source.get("torch"):
        return None
    import torch

    return torch.__version__


_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;]*>)?\s*<<<\s*[^;]*?,\s*"
                     r"(?:(\d+)|dim3\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?\))"
                     r"\s*[,>]")


def launch_block_sizes(code: str) -> dict[str, int]:
    """Threads per block of each `kernel<<<grid, block>>>` launch whose block size is a
    literal (`256` or `dim3(16, 16)`): what occupancy needs and the cubin does not say."""
    sizes = {}
    for match in _LAUNCH.finditer(code):
        dims = [int(d) for d in match.groups()[1:] if d]
        total = 1
        for d in dims:
            total *= d
        sizes.setdefault(match.group(1), total)
    return sizes


def _include_flags(source: dict[str, Any]) -> list[str]:
    """torch's include paths, for its sources and for any that include torch's headers."""
    if not source.get("torch") and not re.search(r"#\s*include\s*[<\"](torch|ATen|c10)/",
                                                 source["code"]):
        return []
    from torch.utils.cpp_extension import include_paths

    paths = [*include_paths(), sysconfig.get_paths()["include"], *source.get("includes", [])]
    return [f"-I{p}" for p in paths]


def _passable(flag: str) -> bool:
    """The version's nvcc flags, less those that choose another output or target."""
    return not re.match(r"-(gencode|arch|code|o$|c$|-generate-code|-gpu-architecture)", flag)


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
