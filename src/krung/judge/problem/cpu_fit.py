"""Whether a KernelBench problem at its declared sizes fits this machine's memory on a CPU.

KernelBench's problems are sized for a GPU: level 1's softmax takes a 6.4 GB input. Run on a
CPU as declared, the judge held 21.5 GB (inputs, the reference's outputs, the copies sent to
the worker) until the kernel's OOM killer took it, six minutes in, and the run ended as
krung's failure, "run it again". So before any rung a CPU run at scale 1 is told its sizes
(from shapes alone, the outputs counted as large as the inputs: krung.judge.problem.footprint;
the meta device's forward would add a second to every turn) and, where they need more memory
than the machine has free, refused at once with the scale to use. The sizes are kept by the
problem's text in the store's build cache (`footprint/`): an elementwise operation in a
problem's get_inputs() on the meta device imports torch._dynamo, a second of a warm turn's two.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from krung.protocol import build_cache
from krung.protocol.errors import UsageError

# The judge's peak over a problem's declared bytes (inputs, weights and outputs) on a CPU:
# 21.5 GB for level 1's softmax, 6.4 GB in and out (2026-12-07, this project's machine).
HEADROOM = 4
SCALES = (0.1, 0.01, 0.001)  # the first of these whose linear shrink fits is suggested
COUNTED = 1  # how footprint counts a problem's bytes: raised when that changes (kept sizes)


def check_fits(path: Path, scale: float, cache: Path | None = None) -> None:
    """Raise UsageError when the KernelBench problem at `path`, at scale 1, needs more memory
    than is available here (nothing for another format, another scale, or sizes the meta
    device cannot tell). Its sizes are read from, or kept in, `cache` where one is given."""
    if scale != 1.0:
        return
    size, free = declared_size(path, cache), available_bytes()
    if size is None or free is None or size * HEADROOM <= free:
        return
    fitting = next((s for s in SCALES if size * s * HEADROOM <= free), SCALES[-1])
    raise UsageError(
        f"{path.name} at its declared sizes moves {size / 2**30:.1f} GiB (inputs, weights and "
        f"outputs); on a CPU the judge needs about {HEADROOM} times that, and this machine has "
        f"{free / 2**30:.1f} GiB available: it would run out of memory",
        hint=f"run it at a smaller scale, `--scale {fitting:g}` (MCP's evaluate: `scale`; "
             f"or KRUNG_SCALE={fitting:g}): "
             f"its sizes times {fitting:g}, with a history of their own; or on a GPU")


def declared_size(path: Path, cache: Path | None) -> int | None:
    """krung.judge.problem.footprint's declared bytes (no forward), kept in `cache` by the
    problem's text and torch's version; a problem the meta device cannot tell is not kept.
    The cache is a shortcut: an entry that cannot be read or written is told again."""
    import torch

    from krung.judge.problem import KERNELBENCH, detect_format
    from krung.judge.problem.footprint import declared_bytes

    entry = None
    if cache is not None and detect_format(path) == KERNELBENCH:  # one file, no folder
        facts = {"problem": path.read_text(errors="replace"), "torch": torch.__version__,
                 "counted": COUNTED}
        entry = cache / f"{build_cache.key(facts)}.json"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            kept = json.loads(entry.read_text())["bytes"]
            if type(kept) is int and kept > 0:  # else a broken entry: told again below
                return kept
    size = declared_bytes(path, forward=False)
    if entry is not None and size is not None:
        # written aside and renamed: a judge beside this one never reads half an entry
        staging = entry.with_name(f".{entry.stem}.{os.getpid()}.tmp")
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            staging.write_text(json.dumps({"bytes": size, "problem": path.name}))
            os.replace(staging, entry)
        except OSError:  # a full disk, a store not ours: this turn goes on without it
            with contextlib.suppress(OSError):
                staging.unlink()
    return size


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux): what can be allocated without swapping."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
