"""A KernelBench problem's bytes at its declared sizes, from shapes alone: `get_inputs()`,
`Model(*get_init_inputs())` and its forward run on torch's meta device, which allocates
nothing (KernelBench's 6.4 GB inputs are described in microseconds). A suite sharing a GPU
schedules a problem it has not run before by these (krung.host.scale.gpu_memory).

    python -m krung.judge.problem.footprint PROBLEM...   a JSON line each: {"path", "bytes"}

Each problem's line is printed as soon as it is told (the problems' own prints go to stderr),
so a caller that stops waiting keeps the lines it has. A problem in another format, whose code
the meta device cannot run (a CPU-only call, an explicit device), or whose description takes
longer than DESCRIBE_S (an import that downloads weights, say) is left out: its need is not
known before it runs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from krung.judge.problem import KERNELBENCH, detect_format
from krung.judge.problem.native import import_problem_file
from krung.protocol import tree

DESCRIBE_S = 5.0  # one problem's import, get_inputs() and Model(...): a suite waits for all
FORWARD_S = 1.0  # a recurrent forward steps through its sequence op by op, even on meta


def declared_bytes(path: Path, forward: bool = True) -> int | None:
    """The inputs', the weights' and the outputs' bytes of a KernelBench problem as declared
    (the outputs counted as the inputs where its forward cannot run on the meta device, or
    without `forward`, which spares the meta device's second of warming up); None for
    another format or a problem the meta device cannot describe."""
    import torch

    if detect_format(path) != KERNELBENCH:
        return None
    if forward:
        _warm_meta()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON lines
            with _at_most(DESCRIBE_S):
                module = import_problem_file(path, f"krung_footprint_{path.stem}", path)
                with torch.device("meta"), torch.no_grad():
                    inputs = module.get_inputs()
                    model = module.Model(*module.get_init_inputs())
            weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
            read = written = tree.nbytes(inputs)
            try:
                if forward:
                    with _at_most(FORWARD_S), torch.device("meta"), torch.no_grad():
                        written = tree.nbytes(model(*inputs))
            except Exception:  # an op without a meta kernel, or a slow one: as large as read
                pass
    except Exception:  # TimeoutError included
        return None
    if any(t.device.type != "meta" for t in tree.leaves(inputs)):
        return None  # drawn somewhere else after all: not a description
    return read + weights + written


@functools.cache
def _warm_meta() -> None:
    """torch's first operation on the meta device loads its registrations (about 2 s): not a
    forward's own time."""
    import torch

    with torch.device("meta"):
        torch.nn.Linear(2, 2)(torch.rand(1, 2)).sum()


@contextlib.contextmanager
def _at_most(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the block after `seconds` (the main thread of this process)."""
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def main(paths: list[str]) -> None:
    warnings.simplefilter("ignore")  # the problems' own warnings: nothing a caller reads
    for path in paths:
        size = declared_bytes(Path(path))
        if size is not None:
            print(json.dumps({"path": path, "bytes": size}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
