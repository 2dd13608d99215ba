"""The NVIDIA command-line tools the artifacts need, found once, run with a time limit.

ptxas, cuobjdump and nvdisasm come from the CUDA toolkit where one is installed (next to
nvcc, under CUDA_HOME, or on PATH) and otherwise from Triton's package, which ships them in
`triton/backends/nvidia/bin`, so a machine without a toolkit can still read a cubin.
Where both exist the newer one wins: a newer disassembler reads older cubins, not the reverse.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

TOOL_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: tuple[int, int] | None  # CUDA release, e.g. (12, 8)

    @property
    def label(self) -> str:
        release = ".".join(map(str, self.version)) if self.version else "?"
        return f"{self.name} {release}"


class ToolFailed(Exception):
    """A tool exited with an error; the message holds its output."""


def find(name: str) -> Tool | None:
    """The newest `name` among the toolkit's and Triton's copies, or None."""
    return _find(name)


@functools.cache
def _find(name: str) -> Tool | None:
    found = [Tool(name, path, _version(path)) for path in _candidates(name)]
    if not found:
        return None
    return max(found, key=lambda t: t.version or (0, 0))


def _candidates(name: str) -> list[str]:
    places: list[Path] = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        places.append(Path(nvcc).resolve().parent)
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(variable):
            places.append(Path(os.environ[variable]) / "bin")
    places.append(Path("/usr/local/cuda/bin"))
    triton = importlib.util.find_spec("triton")
    if triton is not None and triton.origin:
        places.append(Path(triton.origin).parent / "backends" / "nvidia" / "bin")
    paths = [str(p / name) for p in places if (p / name).is_file() and os.access(p / name, os.X_OK)]
    on_path = shutil.which(name)
    if on_path:
        paths.append(on_path)
    return list(dict.fromkeys(os.path.realpath(p) for p in paths))


def _version(path: str) -> tuple[int, int] | None:
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def run(tool: Tool, args: list[str], *, cwd: Path | None = None,
        timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a tool; ToolFailed (with its output) when it exits with an error."""
    try:
        done = subprocess.run([tool.path, *args], capture_output=True, text=True, cwd=cwd,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{tool.label} did not finish within {timeout:g} s: "
                         f"{' '.join([tool.name, *args])}") from None
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()
        raise ToolFailed(f"{tool.label} exited with status {done.returncode}: "
                         f"{output[-4000:]}")
    return done


def demangle(names: list[str]) -> dict[str, str]:
    """C++ symbol -> readable name (c++filt where installed; else the plain identifier)."""
    result = {name: _base_name(name) for name in names}
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    mangled = [n for n in names if n.startswith("_Z")]
    if filt and mangled:
        try:
            out = subprocess.run([filt, *mangled], capture_output=True, text=True,
                                 timeout=30).stdout.splitlines()
            if len(out) == len(mangled):
                result.update(dict(zip(mangled, out, strict=True)))
        except (OSError, subprocess.SubprocessError):
            pass  # the plain identifiers will do
    return result


def _base_name(symbol: str) -> str:
    """`_Z10add_kernelPKfS0_Pfi` -> `add_kernel`; other names stay as they are."""
    match = re.match(r"_Z(?:N\d*)?(\d+)", symbol)
    if not match:
        return symbol
    start = match.end()
    return symbol[start:start + int(match.group(1))] or symbol


def short_name(readable: str) -> str:
    """`void add_kernel<float>(float const*, int)` -> `add_kernel`: a name for files."""
    head = readable.split("(", 1)[0]
    head = re.sub(r"<.*>", "", head).strip().split(" ")[-1]
    return head.split("::")[-1] or readable
