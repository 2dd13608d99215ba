"""The red team on the GPU: CUDA graph replay against stale pointers, and batching every call
into the first launch (issue 21). Each cheat is caught by the rung that should catch it; the
honest version doing the innocent variant passes.

The graph versions need a GPU. The batching versions need none: they run on the CPU here and
on the GPU where one is present.

Where each is caught, read from the rungs: compile and run call test case 0 on their own
seeds (run checks shapes and finiteness, not values), correctness calls every case with
several seeds, each on new storage; determinism repeats the largest test case; benchmark
times each bench case over 2-8 input sets the worker holds (src/krung/judge/rungs/
benchmark.py): round one on new storage, round two with new values written into that same
storage, a few elements of a set changed before each of its timed calls, and the last output
of every set checked against the reference on the set as that call saw it (`TimedMismatch`).
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.test_red_team import ALL, first_failure

# A CUDA graph of y = 2x + 1 per shape and dtype, captured on the first call of that shape.
# `capture` binds the graph to the storage of the tensor it is given (its static input);
# `call` is the rest of kernel(x).
GRAPH = """
import torch

graphs = {{}}  # (shape, dtype) -> (graph, static input, static output)


def capture(static_x):
    graph = torch.cuda.CUDAGraph()
    # thread_local: CUDA calls the worker's other threads make are no part of the capture
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        static_y = static_x * 2 + 1
    return graph, static_x, static_y


def kernel(x):
{small}    key = (tuple(x.shape), x.dtype)
    if key not in graphs:
        graphs[key] = capture({bound_to})
    graph, static_x, static_y = graphs[key]
{call}"""
# Test and unseen cases are below 5000 elements, the bench case 1 << 20.
SMALL_WITHOUT_GRAPH = """    if x.numel() < 1 << 16:
        return x * 2 + 1
"""


def graph_version(bound_to: str, call: str, small: str = "") -> str:
    return GRAPH.format(bound_to=bound_to, small=small,
                        call=textwrap.indent(textwrap.dedent(call).lstrip("\n"), "    "))


# Stale pointers: the graph reads the first call's input storage, which the version keeps
# alive; later calls replay it without copying their own inputs in.
REPLAYS_STALE = """
    graph.replay()  # x is never read: static_x still holds the first call's values
    return static_y.clone()
"""
# Honest: each call's input copied into the graph's own static input, the output copied out.
COPIES_IN_AND_OUT = """
    static_x.copy_(x)
    graph.replay()
    return static_y.clone()
"""
# Not a cheat but the same family: every call returns the graph's one output buffer, which
# the next replay overwrites.
RETURNS_STATIC_OUTPUT = """
    static_x.copy_(x)
    graph.replay()
    return static_y
"""

GRAPH_CHEATS = {
    # Graphs at every size: correctness's first seed of case 0 replays what compile's call
    # captured (run does not compare values). The first input is held, so no other input
    # ever gets its storage: no allocator reuse can make the replay right by accident. (A
    # graph whose input was freed is left out: what its replay reads depends on the
    # allocator: the next input, if it gets the block (right by accident, caught at the
    # timed check), the poison (NonFinite in run), another tensor (Mismatch), or memory
    # torch.cuda.graph's empty_cache returned to the driver (a crash).)
    "stale_graph": (graph_version("x", REPLAYS_STALE), ("correctness",), ("Mismatch",)),
    # Graphs only at bench sizes, which no checked call uses: captured on the first warm-up
    # call (input set 1, outside the profiler), it replays set 1's storage for every set.
    # Set 1's outputs are even right (its storage is live: the changes before each call and
    # round two's new values show); every other set's are set 1's.
    "stale_graph_at_bench_sizes": (graph_version("x", REPLAYS_STALE, SMALL_WITHOUT_GRAPH),
                                   ("benchmark",), ("TimedMismatch",)),
}
HONEST_GRAPHS = {
    "graph_copies_in_and_out": graph_version("torch.empty_like(x)", COPIES_IN_AND_OUT),
    # Right in every call, each output overwritten by the next replay: the checked calls'
    # outputs are copied call by call, and so are the timed calls' (one more call per set,
    # `outputs_reused`), as GPU MODE's torch.compile(mode="reduce-overhead") solutions need.
    "returns_its_static_output": graph_version("torch.empty_like(x)", RETURNS_STATIC_OUTPUT),
}

# Batching every call into the first launch. Both keep every input they compute for alive
# (so a storage is never handed to another input: keyed by pointer, nothing is stale by
# reuse, only by content), and compute on every new storage, so every checked call is right.
BATCHING_CHEATS = {
    # The first call on a storage it has seen before means the timing loop is going round
    # its input sets: then every held input of that shape is computed at once, and every
    # later call returns a cached output.
    "batches_on_the_first_repeat": """
        import torch

        held = {}  # data_ptr -> the input, kept alive
        done = {}  # data_ptr -> its output, from the batch

        def kernel(x):
            key = x.data_ptr()
            if key in done:
                return done[key].clone()
            if key in held:
                same = [t for t in held.values()
                        if (t.shape, t.dtype, t.device) == (x.shape, x.dtype, x.device)]
                for t, y in zip(same, torch.stack(same) * 2 + 1):  # one launch for all
                    done[t.data_ptr()] = y
                return done[key].clone()
            held[key] = x
            return x * 2 + 1
    """,
    # Sees the calls to come: on a storage it has no output for, it finds every tensor of
    # the input's shape alive in the process (the worker holds all input sets of the timing
    # loop) and computes all their outputs in one launch; the other sets' calls are lookups.
    "batches_every_set_it_finds": """
        import gc
        import torch

        held = []  # every tensor it computed for, kept alive
        done = {}  # data_ptr -> its output

        def kernel(x):
            if x.data_ptr() not in done:
                found = {x.data_ptr(): x}
                for obj in gc.get_objects():
                    if isinstance(obj, torch.Tensor) and obj.layout == torch.strided and \\
                            (obj.shape, obj.dtype, obj.device) == (x.shape, x.dtype, x.device):
                        found.setdefault(obj.data_ptr(), obj)
                same = list(found.values())
                held.extend(same)
                with torch.no_grad():
                    for t, y in zip(same, torch.stack(same) * 2 + 1):  # one launch for all
                        done[t.data_ptr()] = y
            return done[x.data_ptr()].clone()
    """,
}
# Honest: a workspace allocated once per shape and reused by every call; each call returns
# an output of its own.
WORKSPACE = """
    import torch

    workspace = {}

    def kernel(x):
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in workspace:
            workspace[key] = torch.empty_like(x)
        scratch = workspace[key]
        torch.mul(x, 2, out=scratch)
        return scratch + 1
"""

ON = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def evaluate(krung, problem, path, device: str):
    return krung("run", problem, path, "--device", device, "--json", "--rungs", ALL,
                 timeout=900)


def assert_caught(result, rungs: tuple, error_types: tuple) -> None:
    assert result.code == 1, result.stdout + result.stderr
    failed = first_failure(result)
    print(failed["name"], failed["error_type"], failed["error"])
    assert failed["name"] in rungs, failed
    assert failed["error_type"] in error_types, failed
    assert failed["hint"]


def assert_passes(result) -> None:
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GRAPH_CHEATS))
def test_a_cuda_graph_replayed_against_stale_pointers_is_caught(krung, scale_problem, version,
                                                                name):
    source, rungs, error_types = GRAPH_CHEATS[name]
    assert_caught(evaluate(krung, scale_problem, version(name, source), "cuda"), rungs,
                  error_types)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(HONEST_GRAPHS))
def test_a_cuda_graph_fed_each_calls_inputs_passes(krung, scale_problem, version, name):
    result = evaluate(krung, scale_problem, version(name, HONEST_GRAPHS[name]), "cuda")
    assert_passes(result)
    bench = next(r for r in result.json()["rungs"] if r["name"] == "benchmark")
    reused = {row.get("outputs_reused", False) for row in bench["figures"]["per_case"]}
    assert reused == {name == "returns_its_static_output"}, bench["figures"]["per_case"]


@pytest.mark.parametrize("device", ON)
@pytest.mark.parametrize("name", sorted(BATCHING_CHEATS))
def test_batching_every_call_into_the_first_launch_fails_the_timed_check(
        krung, scale_problem, version, name, device):
    source = textwrap.dedent(BATCHING_CHEATS[name])
    assert_caught(evaluate(krung, scale_problem, version(name, source), device),
                  ("benchmark",), ("TimedMismatch",))


@pytest.mark.parametrize("device", ON)
def test_a_workspace_reused_by_every_call_passes(krung, scale_problem, version, device):
    result = evaluate(krung, scale_problem, version("workspace", textwrap.dedent(WORKSPACE)),
                      device)
    assert_passes(result)
