"""KernelBench problems, run as they are: one .py file defining `class Model(nn.Module)`,
`get_inputs()` and `get_init_inputs()`. A version defines `class ModelNew` with Model's
constructor and forward signature.

Both models compute with the same weights, and not only the defaults: the judge builds
`Model(*get_init_inputs())` from the evaluation's secret seed, draws every floating-point
parameter and buffer anew (a LayerNorm's weight of ones and bias of zeros would let a
version that ignores them pass), casts it to the precision, and sends the state dict to the
worker, which loads it into `ModelNew(*init_inputs)` (krung/entries.py). Inputs come from
`get_inputs()` with torch's global generator seeded from a fresh secret seed per case, as
KernelBench seeds it; floating-point inputs are cast to the precision, and everything goes
to the device. The tolerance is KernelBench's for the precision (fp32 1e-4, fp16 and bf16
1e-2, as atol and rtol), with krung's PSNR and cosine-similarity floors on top for the half
precisions.

Module-level sizes that only shape `get_inputs()` (a `batch_size` that neither
`get_init_inputs()` nor Model reads, directly or through a constant derived from it) are the
case's sizes, so krung's unseen cases move them to awkward neighbours, and the constants
derived from them move along (krung.judge.problem.sizes): a ModelNew that hard-codes the
declared shape fails there. `--scale` runs the problem at smaller sizes
(krung.judge.problem.scale).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from krung.judge.problem import KERNELBENCH, PRECISIONS, Problem, case_label
from krung.judge.problem.native import import_problem_file
from krung.judge.problem.scale import scaled_value
from krung.judge.problem.sizes import Constants
from krung.protocol import tree
from krung.protocol.errors import ProblemError

TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}  # KernelBench's, by precision
ENTRY_CLASS = "ModelNew"
ENTRY_DOC = ("a version is one .py file defining `class ModelNew(torch.nn.Module)` with the "
             "reference Model's constructor arguments and `forward` signature, returning the "
             "same outputs; krung loads Model's weights (random values) into it, so keep "
             "Model's submodules and parameters under the same names and shapes; it must not "
             "import the problem")


def load_kernelbench(path: Path, precision: str, scale: float = 1.0,
                     inputs_on_device: bool = False) -> Problem:
    module = import_problem_file(path, f"krung_problem_{path.stem}", path)
    defects = check_structure(module)
    if defects:
        raise ProblemError(str(path), defects)
    constants = Constants(path, module)
    facts: dict[str, Any] = {"precision": precision}
    if scale != 1:
        facts.update(scale_constants(constants, scale))
    source = KernelBenchSource(module, path, precision, constants)
    source.on_device = inputs_on_device
    case = {**source.sizes, "dtype": source.dtype}
    problem = Problem(
        name=path.stem, path=path, reference=source.forward, make_inputs=source.make_inputs,
        test_cases=[case], bench_cases=[case], flops=lambda case: 0,
        bytes_moved=source.bytes_moved,
        tolerance={"atol": TOLERANCE[precision], "rtol": TOLERANCE[precision]},
        description=_description(module), format=KERNELBENCH,
        entry={"kind": "module", "name": ENTRY_CLASS}, entry_doc=ENTRY_DOC,
        reference_code=module.Model, facts=facts,
    )
    problem.setup = lambda seed, device: source.setup(problem, seed, device)
    return problem


def check_structure(module: ModuleType) -> list[tuple[str, str]]:
    import torch

    defects = []
    model = getattr(module, "Model", None)
    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
        defects.append(("`Model` is missing or not a torch.nn.Module subclass",
                        "define `class Model(torch.nn.Module)` with `__init__(*init_inputs)` "
                        "and `forward(*inputs)`"))
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name, None)):
            defects.append((f"`{name}` is missing",
                            f"define `def {name}()` returning a list of the "
                            f"{'forward' if name == 'get_inputs' else 'constructor'} "
                            "arguments"))
    return defects


class KernelBenchSource:
    """The problem module, its reference model once built, and the sizes cases may move."""

    def __init__(self, module: ModuleType, path: Path, precision: str, constants: Constants):
        self.module = module
        self.path = path
        self.dtype = PRECISIONS[precision]
        self.constants = constants
        self.sizes = case_sizes(constants)
        self.model: Any = None
        self.input_bytes: dict[str, int] = {}
        self.on_device = False  # get_inputs() drawn on the GPU (KRUNG_INPUTS_ON_DEVICE)

    def setup(self, problem: Problem, seed: int, device: str) -> None:
        """Build the reference model with fresh random weights; tell the worker to load them."""
        import torch

        torch.set_grad_enabled(False)  # the judge's own process: KernelBench runs in no_grad
        dtype = getattr(torch, self.dtype)
        try:
            torch.manual_seed(seed)
            init_inputs = [self.cast(v, device) for v in self.module.get_init_inputs()]
            torch.manual_seed(seed)
            model = self.module.Model(*init_inputs)
        except Exception as exc:
            raise ProblemError(str(self.path), [(
                f"Model(*get_init_inputs()) raised {type(exc).__name__}: {exc}",
                "make Model constructible from what get_init_inputs() returns")]) from exc
        redraw(model, torch.Generator().manual_seed(seed ^ 0x5EED))
        self.model = model.to(device=device, dtype=dtype)
        state = {name: t.detach().clone() for name, t in self.model.state_dict().items()}
        problem.entry = {"kind": "module", "name": ENTRY_CLASS, "init_inputs": init_inputs,
                         "state": state, "dtype": self.dtype}
        problem.facts["state_tensors"] = len(state)  # what ModelNew must hold

    def forward(self, *inputs: Any) -> Any:
        return self.model(*inputs)

    def make_inputs(self, case: dict, seed: int, device: str) -> tuple:
        """get_inputs() with torch's global generator seeded, the case's sizes (and the
        constants derived from them) in place."""
        moved = {name: case[name] for name in self.sizes
                 if name in case and case[name] != self.constants.base.get(name)}
        with self.constants.applied(moved):
            values = self._drawn(seed, device)
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"get_inputs() returned a {type(values).__name__}, not a list")
        inputs = tuple(self.cast(v, device) for v in values)
        self.input_bytes[case_label(case)] = tree.nbytes(inputs)
        return inputs

    def _drawn(self, seed: int, device: str) -> Any:
        """get_inputs() seeded. With `on_device`, on the GPU (torch's default device for the
        call): KernelBench's torch.rand draws a 6.4 GB input in seconds of CPU time, in
        every rung, where the GPU takes milliseconds. A get_inputs() that cannot run that way
        (a CPU-only call inside) is drawn on the CPU, as before. Out of memory is not such a
        call: drawn on the CPU the same seed gives other values (a suite's 8 GiB draw beside
        another problem was then refused as not deterministic), so it is raised."""
        import torch

        if self.on_device and device != "cpu":
            try:
                with torch.device(device):
                    torch.manual_seed(seed)
                    return self.module.get_inputs()
            except torch.cuda.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError):
                pass
        torch.manual_seed(seed)
        return self.module.get_inputs()

    def cast(self, value: Any, device: str) -> Any:
        """Floating-point tensors in the precision, every tensor on the device (integer
        tensors, such as class labels, keep their dtype)."""
        import torch

        dtype = getattr(torch, self.dtype)
        return tree.map_tensors(
            lambda t: t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype),
            value)

    def bytes_moved(self, case: dict) -> int:
        """A lower bound: the inputs and the weights, each read once (outputs unknown here)."""
        weights = sum(t.numel() * t.element_size() for t in self.model.state_dict().values()) \
            if self.model is not None else 0
        return self.input_bytes.get(case_label(case), 0) + weights


def redraw(model: Any, generator: Any) -> None:
    """New random values for every floating-point parameter and buffer the state dict holds,
    at the scale of its default: values that were all positive (variances, norm weights of
    ones) stay positive, within 0.5x to 1.5x of the default; the others are drawn uniformly
    within the default's largest magnitude, or within 0.5 where the default was zeros.
    In place, on the noise: level 3's 2_ShallowWideMLP holds 2.1 G weights, and each
    temporary of that size cost seconds of page faults in every run's setup."""
    import torch

    for tensor in model.state_dict(keep_vars=True).values():
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        default = tensor.detach().float().cpu()
        noise = torch.rand(default.shape, generator=generator)
        low, high = (float(x) for x in default.aminmax())
        if low > 0:
            values = noise.add_(0.5).mul_(default)  # default * (0.5 + noise)
        else:
            bound = max(-low, high) or 0.5  # the largest magnitude
            values = noise.mul_(2).sub_(1).mul_(bound)  # (2 * noise - 1) * bound
        tensor.data.copy_(values)


def input_sizes(path: Path, module: ModuleType) -> dict[str, int]:
    """The case's sizes of a KernelBench file (see `case_sizes`)."""
    return case_sizes(Constants(path, module))


def case_sizes(constants: Constants) -> dict[str, int]:
    """Module-level ints that get_inputs() depends on (directly, or through a constant
    derived from them) and neither get_init_inputs() nor Model does, in the order
    get_inputs() first reads them."""
    fixed = set(constants.roots(constants.read_by("get_init_inputs")
                                + constants.read_by("Model")))
    sizes = {}
    for name in constants.roots(constants.read_by("get_inputs")):
        value = constants.base.get(name)
        if name not in fixed and _is_size(value):
            sizes[name] = value
    return sizes


def scale_constants(constants: Constants, scale: float) -> dict[str, Any]:
    """Scale the file's size constants for good, keeping the model buildable: every size
    constant Model does not read first; where the model then fails to build or run, only
    the sizes of get_inputs() alone, one by one. Returns the facts the run records."""
    model_reads = set(constants.roots(constants.read_by("Model")))
    wanted = constants.roots(constants.read_by("get_inputs")
                             + constants.read_by("get_init_inputs"))
    every = {name: scaled_value(constants.base[name], scale) for name in wanted
             if name not in model_reads and name in constants.base}
    every = {name: value for name, value in every.items() if value != constants.base[name]}
    chosen, note = every, ""
    failure = _probe(constants, every)
    if failure:
        chosen = {}
        for name in case_sizes(constants):
            if name in every and not _probe(constants, {**chosen, name: every[name]}):
                chosen[name] = every[name]
        kept = sorted(set(every) - set(chosen))
        note = (f"scaling every size made the reference fail ({failure}); "
                f"{', '.join(kept)} kept as declared")
    changed = constants.rebase(chosen)
    facts: dict[str, Any] = {"scale": scale, "scaled_sizes": {
        name: f"{constants.declared[name]} -> {value}" for name, value in changed.items()}}
    if note:
        facts["scale_note"] = note
    return facts


def _probe(constants: Constants, changes: dict[str, Any]) -> str:
    """Why the reference model cannot be built and run with these constants ('' if it can):
    one forward pass on the CPU, in float32, with the default weights."""
    import torch

    module = constants.module
    try:
        with constants.applied(changes), torch.no_grad():
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs())
            torch.manual_seed(0)
            model(*module.get_inputs())
    except Exception as exc:  # the problem's own code, at sizes its author did not try
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    return ""


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _description(module: ModuleType) -> str:
    text = (module.__doc__ or getattr(module.Model, "__doc__", None) or "").strip()
    return text.split("\n\n")[0].strip()
