"""Whether a version computes in kernels of its own or only delegates to torch (`delegated`).

Every checked call reports the Triton kernels it launched (krung.worker.guard.OwnKernels,
from the launch log, under the interpreter and on a GPU alike). On a GPU its traced calls
(each case's first seed) also name every kernel the device ran (CUPTI): a kernel the
reference did not launch too, and whose name is not torch's own (`at::native::...`), is the
version's (CUDA C++, CuTeDSL, TileLang, cupy, numba). A call that launched none is delegated.

A call that handed work to a library beside its kernels (tensors to numpy, a BLAS or cuBLAS
symbol called through ctypes: krung.worker.library_calls, on a CPU; on a GPU, a kernel the
device ran whose name is a vendor library's, cuBLAS, cuBLASLt, cuDNN or cuFFT, whatever path
launched it: aten, an extension, a graph; KRUNG_LIBRARY_KERNELS, off until the GPU gate
has run it) is delegated too, own kernel or not, and the library
is named (`library_work`): a token kernel of its own beside numpy's matmul or cuBLAS's gemm
does not carry the work.

On a GPU the census also times each kernel, so a token kernel of the version's own beside
torch's kernels doing the rest is seen too: `own_share` is the least share of a traced
call's device time its own kernels took, and where the policy asks for the version's own
kernel, a call whose own kernels took less than half (`OWN_SHARE_FLOOR`) is delegated.

Where the problem's policy traces torch operators (it forbids some, or asks for the version's
own kernel), the operators the version ran that the reference ran too are named
(`reference_ops`): the computation it handed to torch, own kernel or not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from krung.protocol.errors import RungFailed

# Operators that allocate, view, copy or convert: the glue around a computation, not it.
GLUE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "ones", "ones_like", "full", "full_like", "fill_", "zero_", "view",
    "_unsafe_view", "reshape", "as_strided", "detach", "alias", "t", "transpose", "permute",
    "expand", "contiguous", "clone", "copy_", "_to_copy", "to", "lift_fresh", "resize_",
    "slice", "select", "unsqueeze", "squeeze", "set_", "_local_scalar_dense", "item",
})
# Under require_own_kernel the version's own kernels carry at least this share of a call's
# device time: torch's glue (a cast, a fill) beside them is fine, the computation is not.
OWN_SHARE_FLOOR = 0.5
TORCH_KERNEL_MARKS = ("at::", "at_cuda_detail", "c10::", "pytorch")  # torch's own kernels
# The device kernels of vendor libraries, by the names CUPTI reports (cuBLAS's and cuBLASLt's
# gemms: nvjet on Hopper, xmma, the precompiled CUTLASS and per-architecture ones; cuDNN's
# convolutions; cuFFT's transforms). A kernel written with CUTLASS's or CuTe's templates is
# named otherwise, and stays the version's own.
LIBRARY_KERNELS = (
    ("cuBLAS", re.compile(r"\bcublas(Lt)?(::|_|[A-Z])|\bnvjet_|\bsm\d+_xmma_gemm_|"
                          r"\bcutlass_\d+_(tensorop|simt|wmma)_|"
                          r"\b(maxwell|volta|turing|ampere|hopper)_(\w+_)?[sdhcz]?\d*gemm_\w*_"
                          r"(nn|nt|tn|tt)\b|\bgemv2[NT]_kernel|\bgemvx::|\bgemmSN_(NN|NT|TN|TT)_"
                          r"kernel|\bgemmk1_kernel|\bsplitKreduce_kernel")),
    ("cuDNN", re.compile(r"\bcudnn::|\bsm\d+_xmma_(fprop|dgrad|wgrad)_|\bimplicit_convolve_sgemm")),
    ("cuFFT", re.compile(r"(^|\s)(regular_fft|vector_fft)(_\w+)?<")),
)


def is_torch_kernel(name: str) -> bool:
    return any(mark in name for mark in TORCH_KERNEL_MARKS)


def library_kernel(name: str) -> str | None:
    """The vendor library whose kernel this is, by its name (None: not a known one)."""
    if is_torch_kernel(name):
        return None
    return next((library for library, pattern in LIBRARY_KERNELS if pattern.search(name)), None)


@dataclass
class Delegation:
    """What the version's checked calls launched, gathered over the correctness rung."""

    own: set[str] = field(default_factory=set)  # kernels of its own, by name
    delegated_cases: list[str] = field(default_factory=list)
    version_ops: set[str] = field(default_factory=set)  # from traced calls
    reference_ops: set[str] = field(default_factory=set)
    reference_kernels: set[str] | None = None  # GPU: what the reference ran (CUPTI)
    undecided: list[str] = field(default_factory=list)  # cases without a kernel census
    libraries: set[str] = field(default_factory=set)  # work handed to libraries, in words
    named: set[str] = field(default_factory=set)  # identifiers the version's source spells
    library_kernels: bool = False  # GPU: vendor-library kernels by name (KRUNG_LIBRARY_KERNELS)
    shares: dict[str, float] = field(default_factory=dict)  # GPU: own kernels' share, by case
    thin: dict[str, str] = field(default_factory=dict)  # cases under OWN_SHARE_FLOOR: who ran

    def library_of(self, kernel: str) -> str | None:
        """The vendor library a device kernel is from, unless the version's source names it
        (its own CUDA C++, whatever its name) or the rule is off."""
        if not self.library_kernels or base_name(kernel) in self.named:
            return None
        return library_kernel(kernel)

    def own_kernels(self, reply: dict[str, Any]) -> list[str]:
        """The kernels of the version's own one call launched."""
        names = set(reply.get("kernels") or [])
        device = reply.get("device_kernels")
        if device:
            known = self.reference_kernels or set()
            names |= {k for k in device if k not in known and not is_torch_kernel(k)
                      and self.library_of(k) is None}
        return sorted(names)

    def note(self, reply: dict[str, Any], label: str, reference_ops: set[str] | None,
             census: bool = True) -> bool:
        """Take one call's report; whether it was delegated (no kernel of its own). Without
        a `census` of the device's kernels (CUPTI off or unable to start, on a GPU), a call
        with no Triton kernel is undecided, not delegated: its kernels could be CUDA C++."""
        own = self.own_kernels(reply)
        self.own.update(own)
        self.note_share(reply, label, set(own))
        if reply.get("ops") is not None:
            self.version_ops.update(reply["ops"])
        if reference_ops is not None:
            self.reference_ops.update(reference_ops)
        handed = handed_to_libraries(reply.get("library")) + self.library_work(reply)
        if handed:  # the work was the library's, whatever kernel stood beside it
            self.libraries.update(handed)
            if label not in self.delegated_cases:
                self.delegated_cases.append(label)
            return True
        if own:
            return False
        if not census:
            if label not in self.undecided:
                self.undecided.append(label)
            return False
        if label not in self.delegated_cases:
            self.delegated_cases.append(label)
        return True

    def note_share(self, reply: dict[str, Any], label: str, own: set[str]) -> None:
        """The share of one call's device time its own kernels took (GPU, from the census),
        and who ran the rest where that share is under OWN_SHARE_FLOOR."""
        times = reply.get("device_kernel_ns")
        total = sum(times.values()) if times else 0
        if not total or not own:
            return
        share = sum(ns for name, ns in times.items() if name in own) / total
        self.shares[label] = min(share, self.shares.get(label, 1.0))
        if share < OWN_SHARE_FLOOR:
            others = sorted(((ns, name) for name, ns in times.items() if name not in own),
                            reverse=True)[:3]
            self.thin[label] = (
                f"its own kernels ({', '.join(sorted(own))}) took {share:.0%} of the call's "
                "device time; the rest ran in " + ", ".join(
                    f"{_short(name)} ({ns / total:.0%})" for ns, name in others))

    def library_work(self, reply: dict[str, Any]) -> list[str]:
        """One call's vendor-library kernels on the device (CUPTI's census), in words; the
        version's own Triton kernels are its own whatever their names."""
        own = set(reply.get("kernels") or [])
        found: dict[str, list[str]] = {}
        for name in sorted(set(reply.get("device_kernels") or []) - own):
            library = self.library_of(name)
            if library:
                found.setdefault(library, []).append(_short(name))
        return [f"{library} kernels: {', '.join(names)}" for library, names in found.items()]

    def shared_ops(self) -> list[str]:
        """The reference's operators (less the glue) the version ran too."""
        return sorted((self.version_ops & self.reference_ops) - GLUE_OPS)

    def figures(self, traced: bool) -> dict[str, Any]:
        figures: dict[str, Any] = {"delegated": bool(self.delegated_cases),
                                   "own_kernels": sorted(self.own)}
        if traced:
            figures["reference_ops"] = self.shared_ops()
        if self.libraries:
            figures["library_work"] = sorted(self.libraries)
        if self.shares:
            figures["own_share"] = round(100 * min(self.shares.values()), 1)
        if self.undecided:
            figures["delegation_unknown"] = (
                f"{len(self.undecided)} case(s) without a kernel census (KRUNG_KERNEL_CENSUS=0"
                " or CUPTI unavailable): no Triton kernel seen, other kernels not named")
        return figures

    def failure(self, label: str, figures: dict[str, Any]) -> RungFailed:
        """Delegated: the policy asks for the version's own kernel, and this call had none
        (or its own kernels stood beside the work: `thin`)."""
        if label in self.thin and not self.libraries:
            return RungFailed(
                "Delegated", f"case {label}: {self.thin[label]}, and the problem's policy asks "
                f"for the version's own kernels to do the work (require_own_kernel: at least "
                f"{OWN_SHARE_FLOOR:.0%} of each call's device time)",
                "move the work those kernels do into a kernel of your own; torch's glue "
                "(allocation, a cast) beside your kernels is fine", figures=figures)
        ran = self.shared_ops()
        what = (f"it ran only torch's operators ({', '.join('aten::' + o for o in ran)}, as the "
                "reference does)" if ran else "it ran only torch's operators")
        done = f"the version launched no kernel of its own; {what}"
        if self.libraries:
            done = (f"the version handed its work to a library ({'; '.join(sorted(self.libraries))}"
                    f"){' beside its own kernels' if self.own else ''}")
        return RungFailed(
            "Delegated", f"case {label}: {done}, and the problem's policy asks for its own "
            "kernel to do the work (require_own_kernel)",
            "write the core operation as a kernel of your own (Triton, CUDA C++, ...) and "
            "launch it from the entry point; calling torch or a vendor library does not count",
            figures=figures)


def _short(kernel: str) -> str:
    return kernel if len(kernel) <= 80 else kernel[:77] + "..."


def handed_to_libraries(library: dict[str, Any] | None) -> list[str]:
    """One call's handoffs to libraries (krung.worker.library_calls), in words."""
    if not library:
        return []
    handed = []
    if library.get("numpy"):
        handed.append("numpy: tensors handed to it during the call")
    if library.get("symbols"):
        handed.append(f"ctypes: {', '.join(library['symbols'])} resolved")
    return handed


def base_name(kernel: str) -> str:
    """`add_kernel` of `void ns::add_kernel<float>(float*, int)`, as CUPTI names kernels."""
    head = re.sub(r"^void\s+", "", kernel).split("(")[0].split("<")[0]
    return head.rsplit("::", 1)[-1].strip()


def source_names(source: str) -> set[str]:
    """The identifiers a version's source spells (in its code and its CUDA strings)."""
    return set(re.findall(r"[A-Za-z_]\w*", source))


def traced_reference(ctx: Any, inputs: tuple) -> tuple[list, set[str] | None, set[str] | None]:
    """The reference's outputs on `inputs`, with the torch operators it ran (where the policy
    traces them) and, on a GPU, the kernels it launched (None where CUPTI cannot start)."""
    import contextlib

    from krung.worker.guard import OpTrace, OwnKernels

    trace = OpTrace(lean=ctx.device == "cpu") if ctx.traces_ops else contextlib.nullcontext()
    own = OwnKernels(device=ctx.device != "cpu" and ctx.settings.kernel_census)
    with own:
        with trace:
            expected = ctx.expected(inputs)
        if ctx.device != "cpu":
            import torch

            torch.cuda.synchronize()
    ops = trace.ops if isinstance(trace, OpTrace) else None
    return expected, ops, (set(own.device_names) if own.device_names is not None else None)
