"""Reading a version without importing it."""

from __future__ import annotations

import ast
import hashlib

import pytest
import torch

from krung.judge.candidate import Candidate
from krung.judge.solution import detect_dsl, entry_point, read_copy, read_solution
from krung.protocol import messages
from krung.protocol.errors import UsageError
from krung.protocol.messages import VersionChanged


@pytest.mark.parametrize("source, dsl", [
    ("import triton\nimport triton.language as tl\n", "triton"),
    ("from torch.utils.cpp_extension import load_inline\nimport triton\n", "cuda"),
    ("import cupy as cp\n", "cupy"),
    ("from numba import cuda\n", "numba"),
    ("import cutlass.cute as cute\n", "cutedsl"),
    ("import tilelang\n", "tilelang"),
    ("import torch\n", "torch"),
])
def test_detect_dsl(source, dsl):
    assert detect_dsl(ast.parse(source)) == dsl


@pytest.mark.parametrize("source, found", [
    ("def kernel(x):\n    return x\n", True),
    ("kernel = lambda x: x\n", True),
    ("from impl import fast as kernel\n", True),
    ("def kernel_v2(x):\n    return x\n", False),
    ("def outer():\n    def kernel(x):\n        return x\n", False),
])
def test_entry_point(source, found):
    assert (entry_point(ast.parse(source)) is not None) is found


def test_read_solution_hashes_the_bytes(tmp_path):
    path = tmp_path / "v.py"
    path.write_text("def kernel(x):\n    return x\n")
    solution = read_solution(path)
    assert len(solution.sha256) == 64 and solution.source.startswith("def kernel")
    with pytest.raises(UsageError):
        read_solution(tmp_path / "missing.py")
    (tmp_path / "v.cu").write_text("")
    with pytest.raises(UsageError, match="not a Python file"):
        read_solution(tmp_path / "v.cu")


def test_read_copy_checks_the_bytes_the_host_read(tmp_path):
    user, copy = tmp_path / "v.py", tmp_path / "run" / "v.py"
    copy.parent.mkdir()
    user.write_text("def kernel(x):\n    return x * 3\n")  # edited since the host read it
    copy.write_text("def kernel(x):\n    return x * 2\n")
    sha256 = hashlib.sha256(copy.read_bytes()).hexdigest()
    solution = read_copy(copy, user, sha256)
    assert solution.path == user and solution.copy == copy and "x * 2" in solution.source
    with pytest.raises(VersionChanged, match=r"not the 0{64}"):
        read_copy(copy, user, "0" * 64)


# A Triton kernel: the interpreter reads its source through inspect, as the compiler does.
TRITON_VERSION = """
import torch
import triton
import triton.language as tl

@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * FACTOR, mask=mask)

def kernel(x):
    y = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
"""


def test_the_worker_runs_the_runs_copy_and_refuses_other_bytes(tmp_path):
    """The user's file changed after the host read it: the worker runs the copy's bytes,
    Triton's source included, under the user's name; a copy whose bytes are not those the
    host read is refused."""
    user, copy = tmp_path / "v.py", tmp_path / "run" / "v.py"
    copy.parent.mkdir()
    user.write_text(TRITON_VERSION.replace("FACTOR", "3.0"))
    copy.write_text(TRITON_VERSION.replace("FACTOR", "2.0"))
    sha256 = hashlib.sha256(copy.read_bytes()).hexdigest()
    x = torch.randn(1000, generator=torch.Generator().manual_seed(5))
    for digest, loads in ((sha256, True), ("0" * 64, False)):
        candidate = Candidate("cpu", tmp_path, user)
        candidate.start()
        try:
            load = candidate.request(messages.Load(path=str(copy), shown_as=str(user),
                                                   sha256=digest), 120, "load")
            if not loads:
                assert isinstance(load, messages.Failed), load
                assert load.error["type"] == "VersionChanged" and "0" * 64 in load.error["message"]
                continue
            assert isinstance(load, messages.Loaded), load
            call = candidate.request(messages.Call(inputs=[x]), 120, "call")
            assert isinstance(call, messages.Called), call
            assert torch.equal(call.outputs[0], x * 2.0)
        finally:
            candidate.close()


def test_a_run_keeps_the_bytes_it_evaluated_and_names_the_users_file(store, tmp_path,
                                                                     scale_problem):
    import krung
    from krung.host.store import Store

    user = tmp_path / "raises.py"
    user.write_text("def kernel(x):\n    return x * 2 + 1 / 0\n")
    run = krung.evaluate(scale_problem, user, store=store, device="cpu",
                         rungs="static,compile,run")
    failed = next(r for r in run.rungs if r.status.value == "failed")
    assert failed.error_type == "ZeroDivisionError"
    assert failed.location == f"{user.resolve()}:2"
    db = Store(store)
    kept = db.artifacts_dir(run.run_id) / "version" / "raises.py"
    db.close()
    assert kept.read_bytes() == user.read_bytes()
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == run.source_sha256
