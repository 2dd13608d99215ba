"""What the compiler made of a version: IR, PTX, CUBIN and SASS per kernel, and the figures
they give (registers, shared memory, spills, occupancy, instruction mix).

One backend per DSL, each a small module with two methods, registered in `BACKENDS`:
`prepare(request)` runs in the build process before the version is imported (to hook how the DSL
compiles, e.g. torch's `load_inline`), `collect(request, out_dir)` after it, writing the
files of each kernel to `out_dir/<kernel>/<specialisation>.<stage>` and returning one record
(a dict; `.json` beside the files) per specialisation. Adding a DSL is adding one module and
one line here. What is common to every DSL (disassembly, resource reports, figures) is in
krung.judge.rungs.artifacts.inspect and works from the files alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from krung.protocol.messages import Build

DEFAULT_ARCH = "sm_90a"  # what krung compiles for where no GPU says otherwise: Hopper


@dataclass(frozen=True)
class Target:
    arch: str  # e.g. sm_90a

    @property
    def capability(self) -> int:
        return int(re.sub(r"\D", "", self.arch))

    @classmethod
    def parse(cls, text: str) -> Target:
        match = re.fullmatch(r"sm_?(\d{2,3})(a?)", text.strip().lower())
        if not match:
            from krung.protocol.errors import UsageError

            raise UsageError(f"{text!r} is not a GPU architecture krung knows",
                             hint="write it as nvcc does, e.g. sm_90a (Hopper) or sm_80")
        return cls(f"sm_{match.group(1)}{match.group(2)}")


class Backend(Protocol):
    dsl: str

    def prepare(self, request: Build) -> None: ...

    def collect(self, request: Build, out_dir: Path) -> list[dict[str, Any]]: ...


def backends() -> dict[str, Backend]:
    """The registry: DSL name -> backend. Imported lazily so the worker stays lean."""
    from krung.judge.rungs.artifacts.cuda_backend import CudaBackend
    from krung.judge.rungs.artifacts.triton_backend import TritonBackend

    return {"triton": TritonBackend(), "cuda": CudaBackend()}
