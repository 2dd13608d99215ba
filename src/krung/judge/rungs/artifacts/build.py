"""The build process: imports the version (not under Triton's interpreter) and has each
backend write its kernels' artifacts. Started by the artifacts rung as
`python -m krung.judge.rungs.artifacts.build --fd N`, in its own process group and with a time limit,
because importing the version runs the version's code; the judge never imports it.

Request: {"version", "out_dir", "arch", "dsls": [...], "launches": [...], "import_paths"}
(the folders the problem's format lets a version import from, as the worker adds them).
Reply: {"ok": true, "records": [...]} or {"ok": false, "error": {...}}.
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

from krung.protocol.channel import Channel


def build(request: dict[str, Any]) -> dict[str, Any]:
    from krung.judge.rungs.artifacts.target import backends
    from krung.worker.serve import _import_version

    registry = backends()
    chosen = [registry[d] for d in dict.fromkeys(request["dsls"]) if d in registry]
    for backend in chosen:
        backend.prepare(request)
    # Files the problem's format lets a version import (GPU MODE's task.py, utils.py).
    sys.path.extend(p for p in request.get("import_paths", []) if p not in sys.path)
    try:
        _import_version(Path(request["version"]))
    except BaseException as exc:  # the version's own import error: say so, with its stack
        return {"ok": False, "error": {
            "type": type(exc).__name__, "message": f"importing the version to compile its "
            f"kernels failed: {exc}", "details": traceback.format_exc()[-8000:]}}
    out_dir = Path(request["out_dir"])
    records: list[dict[str, Any]] = []
    for backend in chosen:
        records += backend.collect(request, out_dir)
    return {"ok": True, "records": records}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m krung.judge.rungs.artifacts.build")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--max-file-bytes", type=int, default=1 << 30)
    args = parser.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_FSIZE, (args.max_file_bytes, args.max_file_bytes))
    faulthandler.enable()
    channel = Channel.from_fd(args.fd)
    request = channel.recv()
    try:
        reply = build(request)
    except Exception as exc:
        reply = {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc),
                                        "details": traceback.format_exc()[-8000:]}}
    channel.send(reply)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the version may have left threads behind: do not wait for them


if __name__ == "__main__":
    main()
