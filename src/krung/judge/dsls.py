"""The DSLs krung knows: how a version in each is recognised, what it needs installed, and
whether its kernels can run where there is no GPU.

One record per DSL, in one table. The static rung reads a version's imports against it
(nothing is imported); the compile rung asks `missing()` before the worker imports the
version, so a DSL that is not installed fails with the exact `pip install` command instead
of an ImportError deep in the version. What each DSL's compiler leaves behind (PTX, CUBIN,
SASS) is the artifacts backends' job (`krung.judge.rungs.artifacts.target.backends()`, keyed by the same names).
Stdlib only: the judge and the static rung read this without importing torch.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Dsl:
    name: str
    label: str
    # Imports that make a version this DSL (a module or a dotted prefix).
    modules: tuple[str, ...]
    # (module, pip requirement) the version's process needs to import it.
    needs: tuple[tuple[str, str], ...] = ()
    # Needed only to build on a GPU (torch's extension builds need ninja).
    build_needs: tuple[tuple[str, str], ...] = ()
    # Whether its kernels run on a machine without a GPU (Triton: its interpreter).
    runs_on_cpu: bool = False


# The first match wins, so a CUDA C++ version that also imports triton for a helper is
# still CUDA. `cuda` covers torch's cpp_extension and NVRTC through cuda.core.
DSLS: tuple[Dsl, ...] = (
    Dsl("cutedsl", "CuTeDSL", ("cutlass",), (("cutlass", "nvidia-cutlass-dsl"),)),
    Dsl("tilelang", "TileLang", ("tilelang",), (("tilelang", "tilelang"),)),
    Dsl("cuda", "CUDA C++", ("torch.utils.cpp_extension", "cuda.core", "cuda.bindings"),
        build_needs=(("ninja", "ninja"),)),
    Dsl("numba", "numba-cuda", ("numba",), (("numba", "numba-cuda[cu12]"),)),
    Dsl("cupy", "CuPy", ("cupy",), (("cupy", "cupy-cuda12x"),)),
    Dsl("triton", "Triton", ("triton",), (("triton", "triton"),), runs_on_cpu=True),
)
TORCH = Dsl("torch", "plain torch", (), runs_on_cpu=True)

# Modules a version may import whose package has another name on PyPI.
_PACKAGES = {
    "cuda.core": "cuda-core[cu12]", "cuda.bindings": "cuda-bindings", "cutlass": "nvidia-cutlass-dsl",
    "numba": "numba-cuda[cu12]", "cupy": "cupy-cuda12x", "tilelang": "tilelang",
    "triton": "triton", "ninja": "ninja",
}


def detect(modules: list[str]) -> Dsl:
    """The DSL of a version from the modules it imports."""
    for dsl in DSLS:
        if any(m == prefix or m.startswith(prefix + ".") for m in modules
               for prefix in dsl.modules):
            return dsl
    return TORCH


def missing(modules: list[str], device: str) -> list[tuple[str, str]]:
    """(module, pip requirement) for each known DSL package the version imports that is not
    installed for this interpreter, plus what building it on `device` needs."""
    wanted: dict[str, str] = {}
    for module in modules:
        for prefix, package in _PACKAGES.items():
            if module == prefix or module.startswith(prefix + "."):
                wanted.setdefault(prefix, package)
    dsl = detect(modules)
    for module, package in dsl.needs:
        wanted.setdefault(module, package)
    if device != "cpu":
        for module, package in dsl.build_needs:
            wanted.setdefault(module, package)
    return [(m, p) for m, p in wanted.items() if not installed(m)]


def install_command(packages: list[str]) -> str:
    """The command that installs `packages`, with the CUDA 13 variants named where a
    package comes per CUDA major (the `cu12` ones suit torch built for CUDA 12)."""
    command = "pip install " + " ".join(f"'{p}'" if "[" in p else p for p in packages)
    other = [p.replace("12", "13") for p in packages if "12" in p]
    return command + (f" (for CUDA 13: {' '.join(other)})" if other else "")


def installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (find_spec of a dotted name
    imports its parent, so only the top level is looked for, but in a namespace package)."""
    top = module.split(".")[0]
    try:
        if importlib.util.find_spec(top) is None:
            return False
        # `cuda` is a namespace package (cheap to import); numba or torch are not.
        return module == top or top != "cuda" or importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
