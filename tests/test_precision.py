"""Float32 means float32 in the judge and the version's worker alike (their resolve_device):
cuDNN's TF32 is off in both before any problem's or version's code runs, so the reference and
an honest version take float32 algorithms whatever the workspace free at the call (KernelBench
level 1's 76_ on an H100 beside two other problems: half its elements 3e-4 apart)."""

from __future__ import annotations

import random

import pytest

from tests.conftest import SCALE_PROBLEM, write

# The reference and the version each give y = 2x + 1 only where cuDNN's TF32 is off in their
# own process, and values of their own otherwise: the version passes only if both are off.
REFERENCE = '''
    def reference(x):
        if torch.backends.cudnn.allow_tf32:
            return x * 0 - OFFSET
        return x * 2 + 1
'''
VERSION = '''
import torch

def kernel(x):
    if torch.backends.cudnn.allow_tf32:
        return x * 0 + OFFSET
    return x * 2 + 1
'''


@pytest.mark.parametrize("service", ["off", "on"])
def test_the_reference_and_the_version_run_with_cudnns_tf32_off(krung, tmp_path, service):
    offset = repr(random.uniform(3, 9))
    source = SCALE_PROBLEM.replace('''
    def reference(x):
        return x * 2 + 1
''', REFERENCE.replace("OFFSET", offset))
    problem = write(tmp_path / "tf32" / "problem.py", source).parent
    version = write(tmp_path / "v" / "float32.py", VERSION.replace("OFFSET", offset))
    try:
        result = krung("run", problem, version, "--rungs", "static,compile,run,correctness",
                       "--json", env={"KRUNG_SERVICE": service})
    finally:  # the service `run` started waits 15 idle minutes for the next run otherwise
        if service == "on":
            assert krung("service", "stop").code == 0
    assert result.code == 0, result.stdout + result.stderr
    rungs = {r["name"]: r["status"] for r in result.json()["rungs"]}
    assert rungs["correctness"] == "ok", rungs
