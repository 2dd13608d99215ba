"""`krung calibrate`: the GPU's measured ceilings, measured in a child process and kept in the
store (the measurement itself is krung.judge.rungs.roofline.ceilings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from krung.host.store import Store, opened
from krung.judge.rungs.roofline.calibration import Calibration
from krung.protocol.errors import KrungError, UsageError

MEASURE_TIMEOUT_S = 900.0


def calibrate(*, force: bool = False, store: str | Path | Store | None = None,
              timeout_s: float = MEASURE_TIMEOUT_S) -> Calibration:
    """The ceilings of this machine's GPU: from the store when they were measured before
    for this device, driver and library versions (unless `force`), else measured now and
    kept. Raises UsageError where there is no CUDA GPU."""
    with opened(store) as db:
        cache = [] if force else db.calibrations()
        reply = _measure_in_child({"cache": cache, "force": force}, timeout_s)
        calibration = Calibration.from_entry(reply, cached=bool(reply.get("cached")))
        if not calibration.cached:
            db.save_calibration(calibration.entry())
    return calibration


def calibrations(store: str | Path | Store | None = None) -> list[Calibration]:
    """Every calibration kept in the store, newest first (no GPU needed)."""
    with opened(store) as db:
        return [Calibration.from_entry(e, cached=True) for e in db.calibrations()]


def _measure_in_child(request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    try:
        done = subprocess.run([sys.executable, "-m", "krung.judge.rungs.roofline.ceilings"],
                              input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout_s, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except subprocess.TimeoutExpired:
        raise KrungError(f"the calibration took more than {timeout_s:g} s and was stopped",
                         hint="check that the GPU is not busy with other work "
                              "(nvidia-smi), then run `krung calibrate` again") from None
    lines = done.stdout.strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else None
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise KrungError(f"the calibration process exited with status {done.returncode} "
                         f"without a result; its output ends with:\n{done.stderr[-2000:]}",
                         hint="run `python -m krung.judge.rungs.roofline.ceilings < /dev/null` to see the "
                              "whole error")
    if "error" in reply:
        raise UsageError(reply["error"], hint=reply.get("hint"))
    return reply
