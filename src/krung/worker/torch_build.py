"""CUDA C++ versions on a GPU: torch's own build, in a cache under the store, timed apart.

Runs in the worker, before a CUDA C++ version is imported (the judge asks for it in the
`load` request). torch's `load_inline` and `load` are wrapped so that:
- each extension builds in `<store dir>/build_cache/torch_extensions/<name>_<key>/`, the key
  a hash of its sources, flags and the torch/CUDA versions (krung.protocol.build_cache): an unchanged
  source is not rebuilt in a later run (ninja finds its objects up to date), and two versions
  that use the same extension name do not rebuild over each other;
- the time of each build is noted, so the compile rung reports it apart from the call;
- an nvcc error names the line of the version's own `.py` file where the CUDA line sits
  (krung.worker.cuda_source), raised as `CudaCompileError` with nvcc's messages in the details.
"""

from __future__ import annotations

import functools
import inspect
import time
from pathlib import Path
from typing import Any

from krung.protocol import build_cache
from krung.worker import cuda_source

_builds: list[dict[str, Any]] = []

# load_inline's arguments that change what is built (build_directory and verbose do not).
_INLINE_KEYS = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                "extra_ldflags", "extra_include_paths", "with_cuda", "is_python_module",
                "with_pytorch_error_handling", "no_implicit_headers")
_LOAD_KEYS = ("sources", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
              "extra_include_paths", "with_cuda", "is_python_module", "is_standalone")
# What torch puts before the sources in the files it compiles.
_CUDA_PREAMBLE_LINES = 3  # torch/types.h, cuda.h, cuda_runtime.h
_CPP_PREAMBLE_LINES = 1  # torch/extension.h


class CudaCompileError(Exception):
    """nvcc (or the host compiler) rejected the version's CUDA C++: where, and why."""

    def __init__(self, message: str, location: str | None, details: str):
        super().__init__(message)
        self.krung_location = location
        self.krung_details = details


def builds() -> list[dict[str, Any]]:
    """The builds since the last call: name, build_s, cache (hit or miss), folder."""
    done = list(_builds)
    _builds.clear()
    return done


def install(root: str | Path, version: Path) -> None:
    """Wrap torch.utils.cpp_extension.load_inline and load (once per process)."""
    from torch.utils import cpp_extension

    if getattr(cpp_extension.load_inline, "krung_wrapped", False):
        return
    text = version.read_text(errors="replace")
    cpp_extension.load_inline = _wrap(cpp_extension.load_inline, root, text, version, True)
    cpp_extension.load = _wrap(cpp_extension.load, root, text, version, False)


def _wrap(original: Any, root: str | Path, text: str, version: Path, inline: bool) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def build(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        name = arguments["name"]
        facts = _facts(arguments, inline)
        if arguments.get("build_directory") is None:
            arguments["build_directory"] = str(build_cache.torch_build_dir(root, name, facts))
        folder = Path(arguments["build_directory"])
        cached = build_cache.built(folder, name)
        # torch inserts its headers into a list of sources it is given: keep them as written
        written = {k: _pieces(arguments.get(k)) for k in ("cuda_sources", "cpp_sources")}
        start = time.perf_counter()
        try:
            return original(*bound.args, **bound.kwargs)
        except Exception as exc:
            if "Error building extension" not in str(exc):
                raise
            raise _compile_error(exc, {**arguments, **written}, folder, text, version,
                                 inline) from exc
        finally:
            _builds.append({"name": name, "build_s": round(time.perf_counter() - start, 3),
                            "cache": "hit" if cached else "miss", "folder": str(folder)})

    build.krung_wrapped = True  # type: ignore[attr-defined]
    return build


def _facts(arguments: dict[str, Any], inline: bool) -> dict[str, Any]:
    import torch

    keys = _INLINE_KEYS if inline else _LOAD_KEYS
    facts: dict[str, Any] = {k: arguments.get(k) for k in keys}
    if not inline:  # a source file's text, not only its path
        sources = arguments.get("sources")
        paths = [sources] if isinstance(sources, str) else list(sources or [])
        facts["texts"] = [_read(p) for p in paths]
    facts["torch"] = torch.__version__
    facts["cuda"] = torch.version.cuda
    return facts


def _compile_error(exc: Exception, arguments: dict[str, Any], folder: Path, text: str,
                   version: Path, inline: bool) -> CudaCompileError:
    output = str(exc)
    records = []
    if inline:
        headers = not arguments.get("no_implicit_headers")
        for file, key, preamble in (("cuda.cu", "cuda_sources", _CUDA_PREAMBLE_LINES),
                                    ("main.cpp", "cpp_sources", _CPP_PREAMBLE_LINES)):
            pieces = _pieces(arguments.get(key))
            records.append((str(folder / file), {
                "version": str(version), "segments": cuda_source.segments(text, pieces),
                "preamble_lines": preamble if headers else 0}))
    else:
        sources = arguments.get("sources")
        for path in [sources] if isinstance(sources, str) else list(sources or []):
            records.append((str(Path(path).resolve()), {"file": str(Path(path).resolve())}))
    for compiled, record in records:
        facts = cuda_source.explain_failure(record, output, compiled)
        if facts.get("location"):
            return CudaCompileError(facts["message"], facts["location"], facts["details"])
    first = next((d for d in cuda_source.diagnostics(output, "") if "error" in d["severity"]),
                 None)
    message = first["message"] if first else output.strip().splitlines()[0]
    return CudaCompileError(message, None, output[-6000:])


def _pieces(value: Any) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""
