"""The trust boundary in code: the candidate worker loads only krung.protocol and krung.worker
(and the package's lazy top level), never the judge's or the host's modules, and few of them:
its start-up is on every version's path."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from krung.judge.candidate import Candidate
from krung.judge.rungs.benchmark import CPU_PLAN
from tests.conftest import PROBLEMS

MAX_WORKER_MODULES = 13  # with library_calls (the CPU worker's watch of work handed to libraries)
ALLOWED = re.compile(r"^krung(\.protocol(\..+)?|\.worker(\..+)?)?$")


def _imported(log: str) -> list[str]:
    """The modules a PYTHONPROFILEIMPORTTIME log names (`import time: us | us | name`)."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S.*)$", log, re.M)
    return sorted({n.strip() for n in names})


@pytest.mark.parametrize("preload", [(), ("triton",)], ids=["cold", "warm"])
def test_the_worker_loads_only_protocol_and_worker_modules(tmp_path, preload):
    """Load a Triton version, make a checked call with poisoned outputs and op tracing, time
    it, and list its kernels: every path a ladder takes through the worker on a CPU, started
    cold or warm (as the service starts it: Triton and the operator trace in advance)."""
    solution = PROBLEMS / "softmax" / "solutions" / "triton_rowwise.py"
    candidate = Candidate("cpu", tmp_path, solution, env={"PYTHONPROFILEIMPORTTIME": "1"})
    candidate.start(preload)
    try:
        x = torch.randn(7, 129, generator=torch.Generator().manual_seed(11))
        load = candidate.request({"op": "load", "path": str(solution)}, 120, "load")
        assert load["ok"], load
        call = candidate.request({"op": "call", "inputs": [x], "trace_ops": True,
                                  "poison": {"byte": 255, "specs": [
                                      {"shape": [7, 129], "dtype": "float32"}]}}, 120, "call")
        assert call["ok"], call
        assert torch.allclose(call["outputs"][0], torch.softmax(x, -1), atol=1e-5)
        plan = dataclasses.asdict(dataclasses.replace(CPU_PLAN, max_samples=3))
        timed = candidate.request({"op": "time", "inputs": [[x]], "plan": plan}, 120, "time")
        assert timed["ok"], timed
        kernels = candidate.request({"op": "kernels"}, 120, "kernels")
        assert kernels["ok"] and kernels["launches"], kernels
    finally:
        candidate.close()
    krung_modules = [m for m in _imported((tmp_path / "worker.log").read_text())
                     if m == "krung" or m.startswith("krung.")]
    outside = [m for m in krung_modules if not ALLOWED.match(m)]
    assert not outside, f"the worker imported judge or host modules: {outside}"
    assert "krung.protocol.channel" in krung_modules  # the log is the worker's, and complete
    assert len(krung_modules) <= MAX_WORKER_MODULES, krung_modules


FORKED_PROBE = '''
import os
import sys

def kernel(x):
    loaded = [m for m in sys.modules if m.startswith("krung.") and not re.match(ALLOWED, m)]
    own = open("/proc/self/cmdline", "rb").read()
    if b"krung.judge" not in own:
        raise RuntimeError(f"not a forked worker: {own}")
    if loaded:
        raise RuntimeError(f"the forked worker holds judge or host modules: {loaded}")
    return x * 2 + 1
'''


def test_a_forked_worker_holds_no_judge_or_host_module(krung, scale_problem, version):
    """On a CPU the worker is forked from the judge's first copy (krung.worker.zygote),
    made before the judge imports a module of its own: the version finds only the worker's."""
    probe = FORKED_PROBE.replace("import os\n", f"import os\nimport re\nALLOWED = {ALLOWED.pattern!r}\n")
    done = krung("run", scale_problem, version("probe", probe), "--json",
                 "--rungs", "static,compile,run,correctness")
    result = done.json()
    assert result["outcome"] == "passed", [r["error"] for r in result["rungs"] if r["error"]]
