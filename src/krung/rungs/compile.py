"""compile: the version imports, and its first call compiles (JIT DSLs compile on first use).

The first call runs on the first test case. A compile error fails this rung with the
version's file and line; an error of another kind leaves it to the `run` rung to report.
On a machine without a GPU, Triton kernels are interpreted, not compiled: the figures say so.
"""

from __future__ import annotations

import time
from typing import Any

from krung.guard import NAN_BYTE
from krung.ladder import Context, failure, poison_leaves

NEEDS = ("static",)


def run(ctx: Context) -> dict[str, Any]:
    timeout = ctx.settings.compile_timeout_s
    start = time.perf_counter()
    facts = ctx.candidate.hello(timeout)
    waited_s = time.perf_counter() - start
    start = time.perf_counter()
    reply = ctx.load()
    load_s = time.perf_counter() - start
    if reply.get("triton"):
        ctx.candidate.facts["triton"] = reply["triton"]
    interpreted = ctx.device == "cpu" and bool(reply.get("triton"))

    case = ctx.problem.test_cases[0]
    inputs = ctx.make_inputs(case, ctx.seed_for("compile", 0))
    # output buffers among the inputs hold whatever the judge's allocator had: poison them
    sent = poison_leaves(inputs, ctx.problem.writable_leaves(inputs), NAN_BYTE)
    start = time.perf_counter()
    reply = ctx.candidate.request({"op": "call", "inputs": list(sent)}, timeout,
                                  "the first call (compile)")
    first_call_s = time.perf_counter() - start
    figures: dict[str, Any] = {
        "import_s": round(load_s, 3), "first_call_s": round(first_call_s, 3),
        # the worker starts while the judge loads the problem; this is what was left to wait
        "worker_start_s": facts.get("startup_s"), "worker_wait_s": round(waited_s, 3)}
    if interpreted:
        figures["mode"] = "triton-interpreter"
    if not reply.get("ok"):
        error = reply["error"]
        if error.get("kind") == "compile":
            raise failure(error, "the first call (compile)")
        figures["first_call"] = f"raised {error.get('type')} (reported by the run rung)"
    return figures
