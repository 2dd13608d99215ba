"""The build process: imports the version (not under Triton's interpreter) and has each
backend write its kernels' artifacts. Started by the artifacts rung as
`python -m krung.judge.rungs.artifacts.build --fd N`, in its own process group and with a time limit,
because importing the version runs the version's code; the judge never imports it.

Request: krung.protocol.messages.Build; reply: Built (the records) or Failed.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import resource
import sys
import traceback
from pathlib import Path
from typing import Any

from krung.protocol import messages
from krung.protocol.channel import Channel


def build(request: messages.Build, private: str | None = "not asked for") -> messages.Reply:
    """`private`: None where this process entered a mount namespace of its own at its start
    (the store can be hidden), else why not."""
    from krung.judge.rungs.artifacts.target import backends
    from krung.worker.serve import import_version

    registry = backends()
    chosen = [registry[d] for d in dict.fromkeys(request.dsls) if d in registry]
    for backend in chosen:
        backend.prepare(request)
    # Files the problem's format lets a version import (GPU MODE's task.py, utils.py).
    sys.path.extend(p for p in request.import_paths if p not in sys.path)
    if request.sandbox:  # the worker's walls (krung.worker.guard.restrict), before the import
        from krung.worker.serve import hide_store, raise_walls

        hide_store(request.sandbox, private)  # the store, as the worker hides it
        raise_walls(request.sandbox)
    try:
        shown = Path(request.shown_as) if request.shown_as else None
        import_version(Path(request.version), shown, request.sha256)
    except BaseException as exc:  # the version's own import error: say so, with its stack
        return messages.Failed({
            "type": type(exc).__name__, "message": f"importing the version to compile its "
            f"kernels failed: {exc}", "details": traceback.format_exc()[-8000:]})
    out_dir = Path(request.out_dir)
    records: list[dict[str, Any]] = []
    for backend in chosen:
        records += backend.collect(request, out_dir)
    return messages.Built(records)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m krung.judge.rungs.artifacts.build")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--max-file-bytes", type=int, default=1 << 30)
    parser.add_argument("--private-mounts", action="store_true",
                        help="enter a mount namespace of its own (the store hidden)")
    args = parser.parse_args(argv)
    from krung.worker.guard import private_mounts

    # First: the kernel makes a user namespace only for a process of one thread.
    private = private_mounts() if args.private_mounts else "not asked for"
    resource.setrlimit(resource.RLIMIT_FSIZE, (args.max_file_bytes, args.max_file_bytes))
    faulthandler.enable()
    channel = Channel.from_fd(args.fd)
    import torch  # noqa: F401 (now, while the judge makes the cases' shapes for the request)

    try:
        reply = build(channel.recv(expect=messages.TO_BUILD), private)
    except Exception as exc:
        reply = messages.Failed({"type": type(exc).__name__, "message": str(exc),
                                 "details": traceback.format_exc()[-8000:]})
    channel.send(reply)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the version may have left threads behind: do not wait for them


if __name__ == "__main__":
    main()
