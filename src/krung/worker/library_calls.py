"""Work a version hands to a library beside torch's operators and its own kernels, as far as a
worker can see it: tensors handed to numpy during a call (`Tensor.numpy`, which `np.asarray`
calls too, and DLPack), and library symbols resolved through ctypes (a BLAS's `cblas_sgemm`,
cuBLAS, cuDNN, ...; Python's audit hook sees each lookup, not each call, so a version that
resolved one counts as using it in every call). A version that computes a matmul in a
library beside one token Triton kernel of its own launches a kernel of its own, and no torch
operator the trace could name: this is what tells its work was not its kernel's
(krung.judge.delegation counts such a call as delegated, and names the library).

What it cannot see: a library reached from compiled code of the version's own (an extension
calling cuBLAS: on a GPU, the kernel census names its kernels), a function pointer made from
a raw address, or numpy fed through the buffer protocol of an object that is not a tensor.

Installed in CPU workers only, until the GPU gate has run it. Handoffs are counted only off
the worker's main thread (where krung itself copies outputs), while a checked call runs.
Stdlib and torch only.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any

# Libraries by the symbols a version would resolve through ctypes; the first match names it.
LIBRARIES = (
    ("cuBLASLt", re.compile(r"cublasLt", re.I)),
    ("cuBLAS", re.compile(r"cublas", re.I)),
    ("cuDNN", re.compile(r"cudnn", re.I)),
    ("cuFFT", re.compile(r"cufft", re.I)),
    ("cuSPARSE", re.compile(r"cusparse", re.I)),
    ("CUTLASS", re.compile(r"cutlass", re.I)),
    ("MKL", re.compile(r"^mkl_", re.I)),
    ("oneDNN", re.compile(r"^dnnl_", re.I)),
    ("BLAS", re.compile(r"cblas_|^(scipy_)?[sdcz](gemm|gemv|symm|syrk|trsm|trmm|axpy|dot)"
                        r"(64)?_?$", re.I)),
    ("LAPACK", re.compile(r"lapacke?_", re.I)),
)


def library_of(symbol: str) -> str | None:
    return next((name for name, pattern in LIBRARIES if pattern.search(symbol)), None)


class LibraryWatch:
    """Counts, per checked call, the handoffs to numpy made off the main thread; remembers
    every library symbol resolved through ctypes since it started (a version resolves them
    once, usually at import)."""

    def __init__(self) -> None:
        self.main = threading.get_ident()
        self.open = False  # a checked call runs
        self.numpy = 0
        self.symbols: dict[str, str] = {}  # symbol -> library

    def install(self) -> None:
        """Before the version's import: the audit hook (which nothing can remove) and the
        numpy bridges of torch's tensors, wrapped."""
        import torch

        sys.addaudithook(self._audit)
        for name in ("numpy", "__dlpack__"):
            original = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._counting(original))

    def start(self) -> None:
        self.numpy = 0
        self.open = True

    def take(self) -> dict[str, Any] | None:
        """What the call handed to libraries (None: nothing seen)."""
        self.open = False
        found: dict[str, Any] = {}
        if self.numpy:
            found["numpy"] = self.numpy
        if self.symbols:
            found["symbols"] = [f"{s} ({lib})" for s, lib in sorted(self.symbols.items())]
        return found or None

    def _seen(self) -> bool:
        return self.open and threading.get_ident() != self.main

    def _audit(self, event: str, args: tuple) -> None:
        if event == "ctypes.dlsym" and len(args) > 1 and isinstance(args[1], str):
            library = library_of(args[1])
            if library:
                self.symbols[args[1]] = library

    def _counting(self, original: Any) -> Any:
        watch = self

        def handed_over(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if watch._seen():
                watch.numpy += 1
            return original(tensor, *args, **kwargs)

        handed_over.__name__ = original.__name__
        handed_over.__doc__ = original.__doc__
        return handed_over
