"""The worker's defences (krung.worker.guard), in this process: the poison patterns, glibc's
perturbation of the version's allocations, the sentinels that catch replaced timers, the
operator trace, and the threads a call leaves running."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import torch

from krung.worker import guard, timing
from krung.worker.guard import (
    NAN_BYTE,
    OTHER_BYTE,
    OpTrace,
    PlainOutputs,
    Sentinels,
    perturbed,
    poison,
)

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


class _Holder:
    def send(self) -> str:
        return "sent"


def test_sentinels_catch_krungs_own_code_changed_in_any_way(monkeypatch):
    """The worker's own timing, its classes' methods, its functions' code and the objects it
    holds: each change named, each undone change forgotten."""
    holder = _Holder()
    sentinels = Sentinels({"Holder": holder})
    assert sentinels.tampered() == []
    forged = [
        (timing.Samples, "to_json", lambda self: {}),  # a method replaced
        (timing.Samples, "__getattribute__", lambda self, name: 0),  # one added
        (timing.measure, "__code__", timing.summarise.__code__),  # a function's code
        (timing, "sum", lambda values: 0),  # a builtin shadowed in the module
        (holder, "send", lambda: "forged"),  # a method shadowed on an object
    ]
    said = ["krung.worker.timing.Samples.to_json", "krung.worker.timing.Samples.__getattribute__ (added)",
            "krung.worker.timing.measure.__code__", "krung.worker.timing.sum (added)",
            "Holder.send (set on the instance)"]
    for (owner, name, value), words in zip(forged, said, strict=True):
        monkeypatch.setattr(owner, name, value, raising=False)
        # the one change, under every name it has in the modules loaded here (the test
        # process may hold a judge module that imported the same function)
        found = sentinels.tampered()
        assert words in found and all(f.endswith(words.split(".")[-1]) for f in found), found
        monkeypatch.undo()
    assert sentinels.tampered() == []


def test_outputs_are_taken_as_they_are():
    plain = PlainOutputs()
    x = torch.randn(37, generator=torch.Generator().manual_seed(5))
    honest = torch.empty_like(x)
    torch.mul(x, 3, out=honest)
    assert plain.problem(0, honest) is None
    copy = plain.copy(honest)
    assert torch.equal(copy, honest) and copy.data_ptr() != honest.data_ptr()
    lazy = torch.empty_like(x)
    lazy.clone = lambda *args, **kwargs: x * 3  # the work, run only when krung copies it
    assert "attributes set on it (clone)" in plain.problem(0, lazy)
    compiled = x * 3  # as torch.compile returns its outputs: marked with data of dynamo's
    compiled._dynamo_propagated_dynamic_indices = {0}
    assert plain.problem(0, compiled) is None
    compiled._dynamo_work = lambda: x * 3  # a method under dynamo's prefix is not dynamo's
    assert "attributes set on it (_dynamo_work)" in plain.problem(0, compiled)

    class Lazy(torch.Tensor):
        pass

    assert "subclass of torch.Tensor" in plain.problem(1, x.as_subclass(Lazy))
    assert "not a torch.Tensor" in plain.problem(0, x.numpy())


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


LEAN_TRACE = """
import sys, torch
from krung.worker.guard import OpTrace
a = torch.randn(16, 8)
with OpTrace(lean=True) as trace:
    torch.relu(a).sum()
print(sorted(trace.ops), "torch._dynamo" in sys.modules)
twice = torch.compile(lambda x: torch.sigmoid(x) * 2, backend="eager")
with OpTrace(lean=True) as trace:  # Dynamo first loaded inside the trace
    got = twice(a)
print(sorted(trace.ops), torch.equal(got, torch.sigmoid(a) * 2))
"""


def test_a_lean_trace_records_without_loading_dynamo_and_still_sees_a_compiled_call():
    # a fresh process: this one may have loaded Dynamo already
    done = subprocess.run([sys.executable, "-c", LEAN_TRACE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    plain, compiled = done.stdout.splitlines()[-2:]
    assert plain == "['relu', 'sum'] False"
    assert compiled == "['mul', 'sigmoid'] True"


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


@pytest.mark.parametrize("kept", ["one_buffer", "a_constant_beside", "own_outputs"])
def test_the_timed_calls_outputs_are_each_calls_own_when_calls_share_a_buffer(kept):
    """The worker's timed calls (krung.worker.serve._TimedCall, under the real timer and the
    version's thread): where the calls return one buffer, or a constant beside their own
    output, each set's output is copied before the next call, so every set keeps what its
    own last call computed; where they return outputs of their own, nothing is copied."""
    import random

    from krung.worker.serve import _before_each, _TimedCall
    from krung.worker.timing import TimingPlan, measure

    sets = random.randint(2, 5)
    rows, cols = random.randint(2, 9), random.randint(2, 9)
    inputs = [[torch.randn(rows, cols)] for _ in range(sets)]
    buffer, constant = torch.empty(rows, cols), torch.randn(3)

    def kernel(x):
        if kept == "one_buffer":
            return torch.mul(x, 2, out=buffer)
        return (x * 2, constant) if kept == "a_constant_beside" else x * 2

    call = _TimedCall(guard.VersionThread(), kernel, inputs, PlainOutputs())
    samples = measure(call, sets, "cpu", TimingPlan(warmup_s=0.0, min_samples=3 * sets,
                                                     max_samples=3 * sets + 1),
                      _before_each(call, None, sets))
    call.settle()
    assert len(samples.device_us) > sets
    assert call.shared == (kept != "own_outputs")
    for x, out in zip(inputs, call.outputs, strict=True):
        got = out[0] if kept == "a_constant_beside" else out
        torch.testing.assert_close(got, x[0] * 2)
    if kept == "one_buffer":  # the copies are not the buffer
        assert all(out.data_ptr() != buffer.data_ptr() for out in call.outputs)


def test_several_outputs_are_read_from_the_tuples_storage():
    """A tuple subclass's own iteration (where deferred work could hide) never runs; torch's
    named tuples are taken as tuples."""
    plain = PlainOutputs()
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(8))

    class Deferred(tuple):
        def __iter__(self):
            raise AssertionError("krung ran the version's __iter__")

    first, second = x * 2, x + 1
    got = plain.items(Deferred((first, second)))
    assert got[0] is first and got[1] is second
    found = torch.max(x, dim=1)
    assert plain.is_sequence(found)
    assert [t.data_ptr() for t in plain.items(found)] == [found.values.data_ptr(),
                                                          found.indices.data_ptr()]
