"""The worker's defences (krung.worker.guard), in this process: the poison patterns, glibc's
perturbation of the version's allocations, the sentinels that catch replaced timers, the
operator trace, and the threads a call leaves running."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from krung.worker import guard
from krung.worker.guard import NAN_BYTE, OTHER_BYTE, OpTrace, Sentinels, perturbed, poison

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def filled(byte: int, dtype: torch.dtype, count: int = 8) -> torch.Tensor:
    return torch.empty(count * dtype.itemsize, dtype=torch.uint8).fill_(byte).view(dtype)


def test_the_nan_byte_makes_nan_in_every_float_type():
    for dtype in FLOATS:
        assert torch.isnan(filled(NAN_BYTE, dtype)).all(), dtype
    assert (filled(NAN_BYTE, torch.int32) == -1).all()
    # the determinism rung's second pattern: other bits, so an unwritten element differs
    assert OTHER_BYTE != NAN_BYTE


def test_poison_takes_every_dtype_and_shape_it_is_given():
    specs = [{"shape": [33, 7], "dtype": "float32"}, {"shape": [], "dtype": "bfloat16"},
             {"shape": [0, 5], "dtype": "int64"}, {"shape": [1000], "dtype": "float8_e4m3fn"}]
    poison(specs, NAN_BYTE, "cpu")  # nothing to assert on the allocator's choices: it runs


@pytest.mark.skipif(guard._glibc_mallopt() is None, reason="malloc perturbation is glibc's")
def test_inside_perturbed_new_memory_holds_the_pattern():
    count = int(torch.randint(200, 2000, (1,)).item())  # small: from malloc, not a fresh mmap
    with perturbed(NAN_BYTE):
        inside = torch.empty(count, dtype=torch.float32)
        raw = inside.view(torch.uint8)
        # glibc cannot make 0xFF (its pattern is byte ^ 0xFF): 0xFE, a huge negative float
        assert (raw == 0xFE).all()
        assert (inside < -1e38).all()
    with perturbed(OTHER_BYTE):
        other = torch.empty(count, dtype=torch.float32).view(torch.uint8)
        assert (other == OTHER_BYTE).all()


def test_sentinels_catch_a_replaced_timer_or_comparison(monkeypatch):
    sentinels = Sentinels()
    assert sentinels.tampered() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(torch, "allclose", lambda *args, **kwargs: True)
    assert sentinels.tampered() == ["time.perf_counter", "torch.allclose"]
    monkeypatch.undo()
    assert sentinels.tampered() == []


def test_the_operator_trace_records_what_ran_inside_it_only():
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    torch.relu(a)  # before the trace: not recorded
    with OpTrace() as trace:
        product = a @ b
        total = (product * 2).sum()
    assert {"mm", "mul", "sum"} <= trace.ops
    assert "relu" not in trace.ops
    assert torch.allclose(total, (a @ b * 2).sum())  # the trace changes no result
    torch.abs(a)
    assert "abs" not in trace.ops


def test_threads_left_running_are_seen():
    before = guard.python_threads()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    try:
        assert guard.python_threads() - before == {worker.ident}
    finally:
        stop.set()
        worker.join()
    assert worker.ident not in guard.python_threads() - before
