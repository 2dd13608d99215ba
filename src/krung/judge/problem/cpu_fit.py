"""Whether a KernelBench problem at its declared sizes fits this machine's memory on a CPU.

KernelBench's problems are sized for a GPU: level 1's softmax takes a 6.4 GB input. Run on a
CPU as declared, the judge held 21.5 GB (inputs, the reference's outputs, the copies sent to
the worker) until the kernel's OOM killer took it, six minutes in, and the run ended as
krung's failure, "run it again". So before any rung a CPU run at scale 1 is told its sizes
(from shapes alone, the outputs counted as large as the inputs: krung.judge.problem.footprint;
the meta device's forward would add a second to every turn) and, where they need more memory
than the machine has free, refused at once with the scale to use.
"""

from __future__ import annotations

from pathlib import Path

from krung.protocol.errors import UsageError

# The judge's peak over a problem's declared bytes (inputs, weights and outputs) on a CPU:
# 21.5 GB for level 1's softmax, 6.4 GB in and out (2026-12-07, this project's machine).
HEADROOM = 4
SCALES = (0.1, 0.01, 0.001)  # the first of these whose linear shrink fits is suggested


def check_fits(path: Path, scale: float) -> None:
    """Raise UsageError when the KernelBench problem at `path`, at scale 1, needs more memory
    than is available here (nothing for another format, another scale, or sizes the meta
    device cannot tell)."""
    from krung.judge.problem.footprint import declared_bytes

    if scale != 1.0:
        return
    size, free = declared_bytes(path, forward=False), available_bytes()
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
