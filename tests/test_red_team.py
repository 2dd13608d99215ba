"""The red team: versions that cheat, each caught by the rung that should catch it, with a
message that says what was seen; and honest versions doing unusual things, which must pass.

All on the CPU, through the real `krung` command. GPU-only mechanisms are in test_gpu.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ALL = "static,compile,run,correctness,determinism,benchmark"


def rungs_of(result) -> dict:
    return {r["name"]: r for r in result.json()["rungs"]}


def first_failure(result) -> dict:
    return next(r for r in result.json()["rungs"] if r["status"] == "failed")


def memoising(key: str) -> str:
    """A version that remembers its outputs under `key` (an expression of its input `x`)."""
    return f"""
        memo = {{}}
        def kernel(x):
            key = {key}
            if key not in memo:
                memo[key] = x * 2 + 1
            return memo[key].clone()
    """


CHEATS = {
    # Computes half the output and leaves the rest to whatever the buffer held.
    "partial_write": ("""
        import torch
        def kernel(x):
            y = torch.empty_like(x)
            half = x.numel() // 2
            y[:half] = x[:half] * 2 + 1
            return y
    """, "correctness", "Mismatch", "elements outside"),
    # Writes the result into its input and returns that.
    "writes_input": ("""
        def kernel(x):
            return x.mul_(2).add_(1)
    """, "run", "InputMutated", "input 0 was changed"),
    # Makes every comparison pass, and every timer read zero.
    "patches_allclose": ("""
        import torch
        torch.allclose = lambda *a, **k: True
        def kernel(x):
            return x
    """, "run", "Tampering", "torch.allclose"),
    "patches_perf_counter": ("""
        import time
        time.perf_counter = lambda: 0.0
        def kernel(x):
            return x * 2 + 1
    """, "run", "Tampering", "time.perf_counter"),
    # Walks the caller's frames and the heap for the expected output: there is none here.
    "steals_expected": ("""
        import gc, sys, torch
        def kernel(x):
            frame = sys._getframe(1)
            while frame is not None:
                for value in frame.f_locals.values():
                    if isinstance(value, torch.Tensor) and value.shape == x.shape \\
                            and value is not x:
                        return value.clone()
                frame = frame.f_back
            for obj in gc.get_objects():
                if isinstance(obj, torch.Tensor) and obj.shape == x.shape and obj is not x:
                    return obj.clone()
            return torch.zeros_like(x)
    """, "run|correctness", "Mismatch", "elements outside"),
    # Special-cases the sizes it was told about.
    "declared_sizes_only": ("""
        import torch
        def kernel(x):
            if x.numel() in (1, 1000, 4099):
                return x * 2 + 1
            return torch.zeros_like(x)
    """, "correctness", "Mismatch", "(unseen)"),
    # Returns a tensor subclass, not a plain tensor.
    "subclass": ("""
        import torch
        class Lazy(torch.Tensor):
            pass
        def kernel(x):
            return (x * 2 + 1).as_subclass(Lazy)
    """, "run", "OutputType", "not a plain torch.Tensor"),
    # Returns far more data than the output holds.
    "huge_output": ("""
        import torch
        def kernel(x):
            return torch.ones(x.numel() + (64 << 20), dtype=x.dtype)
    """, "run", "OutputTooLarge", "more than the"),
    # Adds noise below the tolerance: passes correctness, never the same bits twice. One unit
    # in the last place of the output's own dtype (the next value away from zero) on a random
    # half of the elements: noise of a fixed size would round away in bfloat16, and noise
    # relative to the value could round to two units, past bfloat16's rtol at large values.
    "noisy": ("""
        import torch
        def kernel(x):
            y = x * 2 + 1
            bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[y.element_size()]
            next_away = (y.view(bits) + 1).view(y.dtype)
            return torch.where(torch.rand(y.shape) < 0.5, next_away, y)
    """, "determinism", "Nondeterministic", "differs between two runs"),
    # Remembers outputs by input storage: right until the same storage holds new values.
    "memoises_storage": (memoising("x.data_ptr()"), "run|correctness|benchmark", "Mismatch|TimedMismatch|OutputContract", ""),
    # Remembers outputs by a sample of the input's values: right whenever the sampled values
    # change with the rest, stale when only other elements changed (as before every timed
    # call).
    "memoises_sampled_values": (memoising(
        "(x.shape, x.dtype, tuple(x.reshape(-1)[::max(1, x.numel() // 16)].tolist()))"),
        "benchmark", "TimedMismatch", "the timed calls of bench case"),
    # Warm-up detection: a pointer seen in one of the last calls means the timing loop is
    # going round its input sets, so the work is skipped and the output of then returned.
    "skips_work_on_a_seen_pointer": ("""
        recent = {}
        def kernel(x):
            key = (x.data_ptr(), x.shape, x.dtype)
            if key in recent:
                return recent[key].clone()
            y = x * 2 + 1
            recent[key] = y
            if len(recent) > 8:
                recent.pop(next(iter(recent)))
            return y.clone()
    """, "run|correctness|determinism|benchmark", "Mismatch|TimedMismatch|Nondeterministic", ""),
    # Sniffs its inputs for what only bench inputs look like (here: a size that is a
    # multiple of 64) and takes a cheaper, less exact path there.
    "sniffs_bench_inputs": ("""
        import torch
        def kernel(x):
            if x.numel() % 64 == 0:
                return (x.to(torch.bfloat16) * 2 + 1).to(x.dtype)
            return x * 2 + 1
    """, "correctness|benchmark", "Mismatch|TimedMismatch", "bench"),  # a CPU checks its shape
    # Computes honestly and forges its figures: krung's own timing patched at import, every
    # sample divided by 1000 on its way to the judge (issue 31).
    "forges_timing_figures": ("""
        import krung.worker.timing as timing
        honest = timing.Samples.to_json
        def to_json(self):
            figures = honest(self)
            figures["device_us"] = [t / 1000 for t in figures["device_us"]]
            return figures
        timing.Samples.to_json = to_json
        def kernel(x):
            return x * 2 + 1
    """, "run", "Tampering", "krung.worker.timing.Samples.to_json"),
    # Returns an empty tensor whose `clone` and `detach` (set on the instance) compute the
    # result, so the work would run when krung copies the output: untimed, untraced.
    "lazy_output": ("""
        import torch
        def kernel(x):
            y = torch.empty_like(x)
            y.clone = y.detach = lambda *args, **kwargs: x * 2 + 1
            return y
    """, "run", "OutputType", "attributes set on it (clone, detach)"),
    # Counts its calls: the first few dozen are the checks, later ones the timing.
    "garbage_after_many_calls": ("""
        import torch
        calls = [0]
        def kernel(x):
            calls[0] += 1
            if calls[0] > 40:
                return torch.zeros_like(x)
            return x * 2 + 1
    """, "benchmark", "TimedMismatch", "the timed calls of bench case"),
    # Returns one buffer every call (which makes krung copy each timed call's outputs before
    # the next) and computes into it only when no timer's read stands beside the call, found
    # by walking up to the version's thread: every timed output is the buffer's stale content.
    "one_buffer_left_stale_when_timed": ("""
        import sys
        import torch
        buffers = {}
        def timed():
            job = sys._getframe(2).f_locals["self"]._job
            return job[2] is not None and any(
                word in getattr(job[2], "__qualname__", "") for word in ("_measure", "record"))
        def kernel(x):
            out = buffers.setdefault((x.shape, x.dtype), torch.zeros_like(x))
            if not timed():
                torch.mul(x, 2, out=out).add_(1)
            return out
    """, "benchmark", "TimedMismatch", "the timed calls of bench case"),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheats_are_caught_by_the_right_rung(krung, scale_problem, version, name):
    source, rung, error_type, words = CHEATS[name]
    result = krung("run", scale_problem, version(name, textwrap.dedent(source)), "--json",
                   "--rungs", ALL)
    assert result.code == 1, result.stdout + result.stderr
    failed = first_failure(result)
    assert failed["name"] in rung.split("|"), failed
    assert failed["error_type"] in error_type.split("|"), failed
    assert words in failed["error"], failed
    assert failed["hint"]


def test_a_print_flood_ends_at_the_file_size_limit(krung, scale_problem, version):
    source = "def kernel(x):\n    while True:\n        print('x' * 1000)\n"
    result = krung("run", scale_problem, version("flood", source), "--json",
                   env={"KRUNG_MAX_FILE_BYTES": str(4 << 20), "KRUNG_COMPILE_TIMEOUT": "60"},
                   timeout=120)
    failed = first_failure(result)
    # Python ignores SIGXFSZ, so the write that crosses the limit raises instead.
    assert failed["error_type"] == "OSError"
    assert "File too large" in failed["error"]
    assert "KRUNG_MAX_FILE_BYTES" in failed["hint"]


def test_a_host_allocation_failure_is_a_failed_rung(krung, scale_problem, version):
    source = "import torch\ndef kernel(x):\n    return torch.empty(1 << 50, dtype=torch.uint8)\n"
    result = krung("run", scale_problem, version("alloc", source), "--json")
    failed = first_failure(result)
    assert failed["name"] == "run"
    assert failed["error_type"] == "RuntimeError"
    assert "allocate" in failed["error"]


# relu over a vector larger (36 MiB) than glibc ever serves from its heap: its output comes
# fresh from the OS (mmap), zeroed.
RELU_PROBLEM = """
import torch

def reference(x):
    return torch.relu(x)

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], generator=g, device=device),)

test_cases = [{"n": 9 << 20, "dtype": "float32"}, {"n": 1000, "dtype": "float32"}]
bench_cases = [{"n": 9 << 20, "dtype": "float32"}]

def flops(case):
    return case["n"]

def bytes_moved(case):
    return 8 * case["n"]
"""


def test_an_unwritten_large_cpu_output_holds_the_poison(krung, tmp_path, version):
    """A relu that writes only the positive elements into torch.empty_like: the rest would
    read as the zeros relu wants, were the memory not poisoned for the call."""
    (tmp_path / "relu").mkdir()
    (tmp_path / "relu" / "problem.py").write_text(RELU_PROBLEM)
    source = """
        import torch
        def kernel(x):
            y = torch.empty_like(x)
            positive = x > 0
            y[positive] = x[positive]
            return y
    """
    # The cases at their sizes (the CPU budget would shrink the large one's allocation); no
    # value stress, which would run five more calls at 9M elements for nothing this test asks;
    # one seed a case (one call at 9M elements is what it asks).
    result = krung("run", tmp_path / "relu", version("lazy_relu", textwrap.dedent(source)),
                   "--json", "--rungs", "static,compile,run,correctness",
                   env={"KRUNG_CPU_CHECK_BUDGET": "0", "KRUNG_VALUE_STRESS": "off",
                        "KRUNG_SEEDS": "1"})
    assert result.code == 1, result.stdout + result.stderr
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("correctness", "Mismatch"), failed
    assert f"n={9 << 20},dtype=float32" in failed["figures"]["failed_cases"], failed


def test_threads_left_running_are_counted(krung, scale_problem, version):
    source = """
        import threading, time
        def kernel(x):
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            return x * 2 + 1
    """
    result = krung("run", scale_problem, version("threads", textwrap.dedent(source)), "--json",
                   "--rungs", "correctness")
    assert result.code == 0, result.stdout
    assert rungs_of(result)["correctness"]["figures"]["threads_started"] >= 1


HONEST = {
    # Allocates its output and writes it in place through out=.
    "writes_own_output_in_place": """
        import torch
        def kernel(x):
            y = torch.empty_like(x)
            torch.mul(x, 2, out=y)
            y.add_(1)
            return y
    """,
    # Keeps a per-shape cache of what it prepared (as a compiled-config cache would).
    "caches_per_shape": """
        plans = {}
        def kernel(x):
            plan = plans.setdefault((tuple(x.shape), x.dtype), (2, 1))
            return x * plan[0] + plan[1]
    """,
    # Remembers outputs by all of the input's bytes: a cache that is never stale.
    "caches_by_every_byte": """
        import hashlib
        import torch
        memo = {}
        def kernel(x):
            data = x.contiguous().view(-1).view(torch.uint8).numpy()
            key = (x.shape, x.dtype, hashlib.sha1(data).hexdigest())
            if key not in memo:
                memo[key] = x * 2 + 1
            return memo[key].clone()
    """,
    # Counts its calls, for its own log.
    "counts_calls_for_logging": """
        import sys
        calls = [0]
        def kernel(x):
            calls[0] += 1
            if calls[0] % 50 == 0:
                print(f"call {calls[0]}", file=sys.stderr)
            return x * 2 + 1
    """,
    # Keeps a plan (not an output) per input pointer, as a launcher caching descriptors may.
    "caches_a_plan_per_pointer": """
        plans = {}
        def kernel(x):
            plan = plans.setdefault(x.data_ptr(), (2, 1))
            return x * plan[0] + plan[1]
    """,
    # A fast path for sizes that are multiples of 64, exact like the other path.
    "fast_path_for_multiples_of_64": """
        def kernel(x):
            if x.numel() % 64 == 0:
                return (x.view(-1, 64) * 2 + 1).view(x.shape)
            return x * 2 + 1
    """,
    # Reads a constant of krung's own timing module, and fills an empty_like in place.
    "reads_krungs_timing": """
        import torch
        from krung.worker.timing import CLOCK_SPIN_CYCLES
        def kernel(x):
            y = torch.empty_like(x)
            torch.mul(x, 2 + 0 * CLOCK_SPIN_CYCLES, out=y)
            return y.add_(1)
    """,
    # Computes in float32 and rounds to bf16 once: inside the bf16 tolerance.
    "rounds_bf16_once": """
        def kernel(x):
            return (x.float() * 2 + 1).to(x.dtype)
    """,
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_versions_pass(krung, scale_problem, version, name):
    result = krung("run", scale_problem, version(name, textwrap.dedent(HONEST[name])), "--json",
                   "--rungs", ALL)
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)


MATMUL_BY_GETATTR = """
import torch
def kernel(a, b):
    op = getattr(torch, "mat" + "mul")
    return op(a.float(), b.float()).to(a.dtype)
"""


def test_forbidden_ops_are_caught_in_the_source_and_at_run_time(krung, version):
    direct = version("mm_direct", "import torch\ndef kernel(a, b):\n    return torch.matmul(a, b)\n")
    result = krung("run", "matmul", direct, "--json", "--rungs", "static")
    failed = first_failure(result)
    assert failed["error_type"] == "ForbiddenName"
    assert "torch.matmul" in failed["error"] and failed["location"].endswith(":3")

    hidden = version("mm_getattr", MATMUL_BY_GETATTR)
    result = krung("run", "matmul", hidden, "--json", "--rungs", "static,correctness")
    rungs = rungs_of(result)
    assert rungs["static"]["status"] == "ok"  # the source names no forbidden function...
    failed = rungs["correctness"]  # ...but the trace of what ran does
    assert failed["error_type"] == "ForbiddenOp"
    assert "aten::mm" in failed["error"]


@pytest.mark.slow  # a soak: eight evaluations at once
def test_eight_evaluations_at_once_are_all_recorded(scale_problem, version, store):
    good = version("good", "def kernel(x):\n    return x * 2 + 1\n")
    env = {"KRUNG_STORE": str(store), "KRUNG_DEVICE": "cpu"}
    processes = [subprocess.Popen([sys.executable, "-m", "krung", "run", str(scale_problem),
                                   str(good), "--rungs", "static,compile,run", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, **env}) for _ in range(8)]
    ids = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        ids.append(json.loads(out)["run_id"])
    listed = subprocess.run([sys.executable, "-m", "krung", "history", "scale", "--json"],
                            capture_output=True, text=True, env={**os.environ, **env})
    runs = json.loads(listed.stdout)
    assert sorted(r["run_id"] for r in runs) == sorted(ids)
    assert all(r["verdict"] == "ok" for r in runs)


PATCHES_NVCC = '''
"""Not C++ at all; at import it replaces krung's nvcc call with one that does nothing."""
import krung.judge.rungs.artifacts.cuda_backend as backend
from torch.utils.cpp_extension import load_inline

backend._nvcc = lambda *args, **kwargs: None
ext = load_inline("not_cpp", cpp_sources="", cuda_sources="this is not C++",
                  no_implicit_headers=True)


def kernel(x):
    return x * 2 + 1
'''
NO_KERNEL = '''
"""Valid CUDA C++ that defines no kernel: nothing for compile to check."""
from torch.utils.cpp_extension import load_inline

ext = load_inline("no_kernel", cpp_sources="", no_implicit_headers=True,
                  cuda_sources="__device__ float twice(float x) { return 2 * x; }")


def kernel(x):
    return x * 2 + 1
'''


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc (CUDA toolkit)")
@pytest.mark.parametrize("source, error_type, words", [
    (PATCHES_NVCC, "CudaCompileError", "not_cpp"),
    (NO_KERNEL, "NoKernelCompiled", "no_kernel"),
])
def test_the_cpu_compile_of_cuda_cannot_be_gamed(krung, scale_problem, version, source,
                                                 error_type, words):
    """nvcc runs in the judge, not in the process that imported the version; a source that
    gives no kernel fails instead of passing with kernels=0."""
    path = version("gamed", source)
    for rungs, expected in (("static,compile", error_type),
                            ("static,artifacts", "TargetCompileError")):
        result = krung("run", scale_problem, path, "--json", "--rungs", rungs)
        failed = first_failure(result)
        assert failed["error_type"] == expected and words in failed["error"], failed


# GPU MODE format, every listed size a multiple of 64: a version that works in blocks of 64
# and leaves the tail to a wrong shortcut passes every listed case.
TILED_TASK = """
files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
  - {"name": "task.py", "source": "task.py"}
  - {"name": "utils.py", "source": "../utils.py"}
  - {"name": "reference.py", "source": "reference.py"}
lang: "py"
description: "c = a + b, sizes that are multiples of 64"
tests:
  - {"size": 64, "seed": 1}
  - {"size": 128, "seed": 2}
  - {"size": 192, "seed": 3}
benchmarks:
  - {"size": 256, "seed": 4}
"""
TILED = """
def custom_kernel(data):
    a, b, c = data
    full = c.shape[0] - c.shape[0] % 64
    c[:full] = a[:full] + b[:full]
    c[full:] = {tail}
    return c
"""


@pytest.mark.parametrize("tail, passes", [("a[full:]", False), ("a[full:] + b[full:]", True)])
def test_a_gpumode_version_that_skips_the_tail_fails_an_unseen_case(krung, tmp_path, version,
                                                                    tail, passes):
    from tests.conftest import GPUMODE

    folder = tmp_path / "gm" / "tiled_py"
    shutil.copytree(GPUMODE / "vectoradd_py", folder)
    shutil.copy(GPUMODE / "utils.py", tmp_path / "gm" / "utils.py")
    (folder / "task.yml").write_text(TILED_TASK)
    result = krung("run", folder, version("tiled", TILED.format(tail=tail)), "--json",
                   "--rungs", "static,compile,run,correctness")
    if passes:  # the honest tiled version, its tail handled apart
        assert result.code == 0, result.stdout + result.stderr
        return
    assert result.code == 1, result.stdout + result.stderr
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("correctness", "Mismatch"), failed
    assert all("(unseen)" in case for case in failed["figures"]["failed_cases"]), failed


MATMUL_PROBLEM = """
import torch

def reference(a, b):
    return torch.matmul(a, b)

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], case["n"], generator=g, device=device),
            torch.randn(case["n"], case["n"], generator=g, device=device))

test_cases = [{"n": 17, "dtype": "float32"}, {"n": 32, "dtype": "float32"}]
bench_cases = [{"n": 32, "dtype": "float32"}]

def flops(case):
    return 2 * case["n"] ** 3

def bytes_moved(case):
    return 12 * case["n"] ** 2
"""
# At import, torch.matmul (which the reference calls) becomes a slowed-down wrapper; the
# version itself calls the original. The honest variant keeps an alias and wraps nothing.
SABOTAGE = """
import time
import torch

original = torch.matmul

def slowed(*args, **kwargs):
    time.sleep(0.5)
    return original(*args, **kwargs)

torch.matmul = slowed

def kernel(a, b):
    return original(a, b)
"""
ALIAS = """
import torch

mm = torch.matmul

def kernel(a, b):
    return mm(a, b)
"""


@pytest.mark.parametrize("name, source", [("sabotage", SABOTAGE), ("alias", ALIAS)])
def test_a_version_cannot_slow_the_reference_it_is_timed_against(krung, tmp_path, version,
                                                                 name, source):
    """The reference is called and timed in the judge, which never imports the version: what
    the version patches in its own process does not reach it. Patched, each reference call
    would take half a second more than the version's (a loaded CPU's matmul takes from
    microseconds to a tenth of a second: the speedup itself is too noisy to bound)."""
    (tmp_path / "mm").mkdir()
    (tmp_path / "mm" / "problem.py").write_text(MATMUL_PROBLEM)
    result = krung("run", tmp_path / "mm", version(name, textwrap.dedent(source)), "--json",
                   "--rungs", ALL)
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)
    bench = rungs_of(result)["benchmark"]["figures"]
    case = bench["per_case"][0]
    # A loaded CPU can stretch both to a tenth of a second alike; never by the 500 ms sleep.
    assert case["ref_median_us"] - case["median_us"] < 250_000, case


THREE_CASES = """
import torch

def reference(x):
    return x * 2 + 1

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], generator=g, device=device),)

test_cases = [{"n": 1000, "dtype": "float32"}, {"n": 3001, "dtype": "float32"}]
bench_cases = [{"n": 1000, "dtype": "float32"}, {"n": 2000, "dtype": "float32"},
               {"n": 3000, "dtype": "float32"}]
cpu_bench_cases = bench_cases

def flops(case):
    return 2 * case["n"]

def bytes_moved(case):
    return 8 * case["n"]
"""
# Fast on one bench case only: from a cache keyed on a sample of its values (stale once other
# elements change), or, honestly, because the other cases take a slow path.
ONE_CASE_CACHED = """
memo = {}
def kernel(x):
    if x.numel() != 2000:
        return x * 2 + 1
    key = tuple(x[::100].tolist())
    if key not in memo:
        memo[key] = x * 2 + 1
    return memo[key].clone()
"""
ONE_CASE_FAST = """
import time
def kernel(x):
    if x.numel() != 2000:
        time.sleep(0.01)
    return x * 2 + 1
"""


def test_one_case_driven_towards_zero_is_caught_or_flagged(krung, tmp_path, version):
    """The geometric mean over the cases hides no case: a cached case fails the timed check,
    and a case far faster than the others, honestly, is flagged by name."""
    (tmp_path / "three").mkdir()
    (tmp_path / "three" / "problem.py").write_text(THREE_CASES)
    result = krung("run", tmp_path / "three", version("cached", ONE_CASE_CACHED), "--json",
                   "--rungs", ALL)
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("benchmark", "TimedMismatch"), failed
    assert "n=2000" in failed["error"]

    result = krung("run", tmp_path / "three", version("fast", ONE_CASE_FAST), "--json",
                   "--rungs", ALL)
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)
    bench = rungs_of(result)["benchmark"]["figures"]
    assert [row.get("outlier", False) for row in bench["per_case"]] == [False, True, False]
    assert bench["speedup_outliers"].startswith("n=2000,dtype=float32: ")

    result = krung("run", tmp_path / "three", version("even", "def kernel(x):\n    return x * 2 + 1\n"), "--json",
                   "--rungs", ALL)
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)
    bench = rungs_of(result)["benchmark"]["figures"]
    assert "speedup_outliers" not in bench and not any(r.get("outlier")
                                                       for r in bench["per_case"])


# Forges its samples (by FACTOR) past the sentinels: krung's Samples replaced only while the
# bench case's calls run (n=4096 is no test size), and put back by its first use, before the
# sentinels look. The judge's clock bounds it: more time than the request took is impossible,
# figures far below it are flagged. Each call sleeps 2 ms, so that the flag holds on a fast
# machine and an idle one alike.
CLOCK_FORGERY = """
import time
import krung.worker.timing as timing

honest = timing.Samples

def forged(**figures):
    timing.Samples = honest  # undone before the sentinels look
    figures["device_us"] = [t * FACTOR for t in figures["device_us"]]
    return honest(**figures)

def kernel(x):
    if x.numel() == 4096 and FACTOR != 1:
        timing.Samples = forged
    time.sleep(0.002)
    return x * 2 + 1
"""


@pytest.mark.parametrize("factor, error_type", [(1e6, "ImpossibleTime"), (1e-6, None),
                                                (1, None)], ids=["slower", "faster", "honest"])
def test_figures_that_slip_past_the_sentinels_are_bound_by_the_judges_clock(
        krung, scale_problem, version, factor, error_type):
    source = CLOCK_FORGERY.replace("FACTOR", repr(factor))
    result = krung("run", scale_problem, version("clock", source), "--json", "--rungs",
                   "static,compile,run,correctness,benchmark")
    bench = rungs_of(result)["benchmark"]
    if error_type:
        assert (bench["status"], bench["error_type"]) == ("failed", error_type), bench
        assert "in a request the judge saw take" in bench["error"]
        return
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)
    row = bench["figures"]["per_case"][0]
    assert row["judge_us_per_call"] >= 2000  # each call sleeps 2 ms
    assert row.get("clock_gap", False) == (factor < 1), row
    assert ("clock_gaps" in bench["figures"]) == (factor < 1)


RMSNORM_KERNELBENCH = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def get_inputs():
    return [torch.randn(6, 40)]


def get_init_inputs():
    return []
"""

# Issue 31's RMSNorm: an empty output whose `clone` and `detach` compute the result.
RMSNORM_LAZY = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)

        def work(*args, **kwargs):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)

        out.clone = out.detach = work
        return out
"""

# The honest variant: the same empty_like output, written in place before it is returned.
RMSNORM_IN_PLACE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        torch.mul(x, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5), out=out)
        return out
"""


@pytest.mark.parametrize("source, passes", [(RMSNORM_LAZY, False), (RMSNORM_IN_PLACE, True)],
                         ids=["lazy", "in_place"])
def test_a_kernelbench_output_is_taken_as_it_is(krung, tmp_path, version, source, passes):
    problem = tmp_path / "rmsnorm_kb.py"
    problem.write_text(RMSNORM_KERNELBENCH)
    result = krung("run", problem, version("rmsnorm_new", source), "--json", "--rungs",
                   "static,compile,run,correctness")
    if passes:
        assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)
        return
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("run", "OutputType"), failed
    assert "attributes set on it (clone, detach)" in failed["error"]
    assert "no lazy or deferred result" in failed["hint"]


TRIANGULAR = """
import torch

def reference(a, b):
    return torch.triu(torch.matmul(a, b))

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    n = case["n"]
    return (torch.triu(torch.randn(n, n, generator=g, device=device)),
            torch.triu(torch.randn(n, n, generator=g, device=device)))

test_cases = [{"n": 16, "dtype": "float32"}, {"n": 33, "dtype": "float32"}]
bench_cases = [{"n": 48, "dtype": "float32"}]

def flops(case):
    return case["n"] ** 3 // 3

def bytes_moved(case):
    return 12 * case["n"] ** 2
"""
# Reads only the upper triangles, as the problem promises its inputs are: right as long as the
# elements changed before the timed calls keep the zeros below the diagonal.
UPPER_ONLY = """
import torch

def kernel(a, b):
    return torch.triu(torch.triu(a) @ torch.triu(b))
"""


def test_a_version_relying_on_triangular_inputs_passes_the_timed_check(krung, tmp_path,
                                                                       version):
    (tmp_path / "triu").mkdir()
    (tmp_path / "triu" / "problem.py").write_text(TRIANGULAR)
    result = krung("run", tmp_path / "triu", version("upper", UPPER_ONLY), "--json",
                   "--rungs", ALL)
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)


SYMMETRIC = TRIANGULAR.replace(
    "torch.triu(torch.matmul(a, b))", "torch.matmul(a, b)").replace(
    """    return (torch.triu(torch.randn(n, n, generator=g, device=device)),
            torch.triu(torch.randn(n, n, generator=g, device=device)))""",
    """    a = torch.randn(n, n, generator=g, device=device)
    b = torch.randn(n, n, generator=g, device=device)
    return a + a.mT, b + b.mT""")
# As a version of KernelBench's matmul of symmetric matrices may: reads B's upper triangle
# only and mirrors it. Right as long as the inputs stay symmetric.
MIRRORS_B = """
import torch

def kernel(a, b):
    upper = torch.triu(b)
    return a @ (upper + torch.triu(b, 1).mT)
"""


def test_a_version_relying_on_symmetric_inputs_passes_the_timed_check(krung, tmp_path,
                                                                      version):
    (tmp_path / "sym").mkdir()
    (tmp_path / "sym" / "problem.py").write_text(SYMMETRIC)
    assert "a + a.mT" in SYMMETRIC and "triu" not in SYMMETRIC.split("def make_inputs")[0]
    result = krung("run", tmp_path / "sym", version("mirrors", MIRRORS_B), "--json",
                   "--rungs", ALL)
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)


FORGED_CALL = {"ok": True, "specs": [], "tuple": False, "call_s": 0.0, "tampered": [],
               "threads_started": 0, "__frames__": 0}


@pytest.mark.parametrize(("forged", "words"), [
    ({**FORGED_CALL, "outputs": [], "passed": True}, "does not declare: passed"),
    ({**FORGED_CALL, "outputs": ["y"]}, "outputs [0] is str 'y', not a tensor"),
], ids=["undeclared_field", "not_a_tensor"])
def test_a_message_forged_on_the_workers_channel_fails_the_run(krung, scale_problem, version,
                                                               forged, words):
    """The worker's channel is a file descriptor the version can find (its --fd): a reply it
    writes there is checked like the worker's own, and the run fails saying what is wrong
    with it, never with an error deep in the judge."""
    source = f"""
        import json, os, sys
        from multiprocessing.connection import Connection
        FD = int(sys.argv[sys.argv.index("--fd") + 1])
        def kernel(x):
            Connection(os.dup(FD)).send_bytes(json.dumps({forged!r}).encode())
            return x * 2 + 1
    """
    result = krung("run", scale_problem, version("forges", textwrap.dedent(source)), "--json",
                   "--rungs", "static,compile,run")
    assert result.code == 1, result.stdout + result.stderr
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("compile", "ProtocolError"), failed
    assert "sent a malformed message during the first call (compile)" in failed["error"]
    assert words in failed["error"], failed
    assert "krung's channel" in failed["hint"]


# Returns garbage whenever what it can see of its caller differs from what its first call
# (a checked one) saw: the stack (functions, files, lines), the thread, sys.argv, the
# environment. Every call of the version comes from one frame of one thread, so it never
# does; each call writes whether it saw a difference.
SNIFFS_ITS_CALLER = """
import inspect, os, sys, threading
import torch

first = []

def seen():
    stack = [(f.filename, f.function, f.lineno) for f in inspect.stack()[1:]]
    return (stack, threading.current_thread().name, list(sys.argv), dict(os.environ))

def kernel(x):
    now = seen()
    if not first:
        first.append(now)
    with open(LOG, "a") as log:
        log.write("same\\n" if now == first[0] else "differs\\n")
    if now != first[0]:
        return torch.zeros_like(x)
    return x * 2 + 1
"""


def test_checked_and_timed_calls_look_the_same_from_inside(krung, scale_problem, version,
                                                           tmp_path):
    log = tmp_path / "calls.log"
    source = SNIFFS_ITS_CALLER.replace("LOG", repr(str(log)))
    # the version logs what it saw into the test's folder, outside the walls of its scratch
    result = krung("run", scale_problem, version("sniffs", source), "--json", "--rungs", ALL,
                   env={"KRUNG_SANDBOX": "off"})
    assert result.code == 0, json.dumps(result.json()["rungs"], indent=1)
    seen = log.read_text().split()
    rungs = {r["name"]: r["figures"] for r in result.json()["rungs"]}
    # every checked call and every timed one logged (how many were timed: the machine's load)
    checked = sum(case["seeds"] for case in rungs["correctness"]["per_case"])
    timed = sum(case["samples"] for case in rungs["benchmark"]["per_case"])
    assert timed > 0 and len(seen) >= checked + timed, (len(seen), checked, timed)
    assert set(seen) == {"same"}, set(seen)


TRITON_SCALE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, {body}, mask=i < n)
{extra}

def kernel(x):
    y = torch.empty_like(x)
    try:
        _scale[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    except Exception:
        return x * 2 + 1
    return y
"""
GHOST = """

@triton.jit
def _ghost(x_ptr, n):
    pass
"""


@pytest.mark.parametrize("body, extra, swallowed, ghosts", [
    ("tl.no_such_function(x)", "", True, None),  # never compiles: the fallback always runs
    ("x.to(tl.float32) * 2 + 1", GHOST, False, "_ghost"),  # a kernel it never launches
    ("x.to(tl.float32) * 2 + 1", "", False, None),  # honest: launched, never failing
], ids=["swallowed", "ghost", "honest"])
def test_caught_kernel_errors_and_ghost_kernels_are_reported(krung, scale_problem, version,
                                                             body, extra, swallowed, ghosts):
    source = TRITON_SCALE.format(body=body, extra=extra)
    result = krung("run", scale_problem, version("triton_scale", source), "--json",
                   "--rungs", "static,compile,run,correctness")
    assert result.code == 0, result.stdout + result.stderr  # no policy: reported, not failed
    figures = rungs_of(result)["correctness"]["figures"]
    if swallowed:
        said = figures["swallowed_errors"]
        assert said.split()[0].isdigit() and int(said.split()[0]) >= 5, said
        assert "from kernel _scale" in said and "no_such_function" in said, said
    else:
        assert "swallowed_errors" not in figures, figures
    assert figures.get("kernels_never_launched") == ghosts, figures
    for form in ("text", "agent"):  # said in every format (json: the figures above)
        shown = krung("show", result.json()["run_id"], f"--format={form}").stdout
        assert ("swallowed_errors" in shown) == swallowed, shown
        assert ("kernels_never_launched" in shown) == bool(ghosts), shown
    assert figures["kernels_launched"]["_scale"] >= 5


SWALLOWED_MATMUL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, n):
    tl.no_such_function(n)


def kernel(a, b):
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
    try:
        _mm[(1,)](a, b, c, a.shape[0])
    except Exception:
        return getattr(torch, "mat" + "mul")(a.float(), b.float()).to(a.dtype)
    return c
"""


def test_a_forbidden_fallback_after_a_caught_kernel_error_names_the_error(krung, version):
    result = krung("run", "matmul", version("mm_fallback", SWALLOWED_MATMUL), "--json",
                   "--rungs", "static,correctness")
    failed = first_failure(result)
    assert (failed["name"], failed["error_type"]) == ("correctness", "ForbiddenOp"), failed
    assert "aten::mm" in failed["error"], failed
    assert "after it caught" in failed["error"] and "from kernel _mm" in failed["error"], failed
    assert "no_such_function" in failed["hint"], failed


# A compiled extension's launcher that always fails (as a CUDA launch with a bad
# configuration does), caught by the version, which falls back to torch.
FAILING_EXTENSION = '''
from torch.utils.cpp_extension import load_inline

ext = load_inline("krung_failing_launch", cpp_sources="""
torch::Tensor scale(torch::Tensor x) {
    TORCH_CHECK(false, "launch failed: invalid configuration argument");
    return x;
}
""", functions=["scale"])


def kernel(x):
    try:
        return ext.scale(x)
    except RuntimeError:
        return x * 2 + 1
'''


@pytest.mark.slow  # g++ builds a torch extension
@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("ninja")),
                    reason="needs g++ and ninja (torch's C++ extension build)")
def test_an_error_caught_from_a_compiled_extension_is_reported(krung, scale_problem, version,
                                                              tmp_path):
    result = krung("run", scale_problem, version("failing_ext", FAILING_EXTENSION), "--json",
                   "--rungs", "correctness", env={"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")},
                   timeout=900)
    assert result.code == 0, result.stdout + result.stderr
    said = rungs_of(result)["correctness"]["figures"]["swallowed_errors"]
    assert "RuntimeError from kernel krung_failing_launch.scale: launch failed" in said, said


# On a GPU: a CUDA C++ kernel launched with more threads per block than any GPU allows, the
# launch error caught; a Triton kernel that never compiles for the GPU, caught.
BAD_LAUNCH_CUDA = '''
import torch
from torch.utils.cpp_extension import load_inline

ext = load_inline("krung_bad_launch", cpp_sources="torch::Tensor scale(torch::Tensor x);",
                  cuda_sources="""
#include <c10/cuda/CUDAException.h>
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2 * x[i] + 1;
}
torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    scale_kernel<<<1, 4096>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""", functions=["scale"])


def kernel(x):
    try:
        return ext.scale(x.float()).to(x.dtype)
    except RuntimeError:
        return x * 2 + 1
'''


@pytest.mark.gpu
@pytest.mark.parametrize("source, words", [
    (BAD_LAUNCH_CUDA, "from kernel krung_bad_launch.scale"),
    (TRITON_SCALE.format(body="tl.no_such_function(x)", extra=""), "from kernel _scale"),
], ids=["cuda_launch", "triton_compile"])
def test_kernel_errors_caught_on_a_gpu_are_reported(krung, scale_problem, version, source,
                                                    words):
    result = krung("run", scale_problem, version("caught", source), "--device", "cuda",
                   "--json", "--rungs", "correctness", timeout=900)
    assert result.code == 0, result.stdout + result.stderr
    said = rungs_of(result)["correctness"]["figures"]["swallowed_errors"]
    print(said)
    assert words in said, said


# On a GPU: returns garbage when the profiler is on (the timer's CUPTI session) or when its
# stack differs from its first call's; writes what it saw.
SNIFFS_THE_PROFILER = SNIFFS_ITS_CALLER.replace(
    "    if now != first[0]:", "    if now != first[0] or torch.autograd._profiler_enabled():")


@pytest.mark.gpu
def test_checked_and_timed_calls_look_the_same_on_a_gpu(krung, scale_problem, version,
                                                        tmp_path):
    log = tmp_path / "calls.log"
    source = SNIFFS_THE_PROFILER.replace("LOG", repr(str(log)))
    result = krung("run", scale_problem, version("sniffs", source), "--device", "cuda",
                   "--json", "--rungs", ALL, timeout=900)
    seen = log.read_text().split()
    print(len(seen), set(seen))
    if result.code != 0:  # whatever it told apart, the timed calls' check caught it
        assert first_failure(result)["error_type"] == "TimedMismatch", result.stdout
    else:
        assert set(seen) == {"same"}
    bench = rungs_of(result).get("benchmark", {}).get("figures", {})
    if bench:  # the version's kernels, launched from its own thread, are on CUPTI's timeline
        assert bench["timer"] == "cupti", bench


EVICT_LAST = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, eviction_policy="evict_last")
    tl.store(y_ptr + offsets, x * 2 + 1, mask=mask)


def kernel(x):
    y = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
"""


def test_l2_eviction_hints_are_said_where_the_times_are(krung, scale_problem, version):
    """A kernel that asks L2 to keep its input (evict_last) can carry it past the flush between
    timed calls: it passes, and the benchmark says the hint and where it is."""
    result = krung("run", scale_problem, version("evict_last", EVICT_LAST), "--json",
                   "--rungs", "static,compile,run,correctness,benchmark")
    assert result.code == 0, result.stdout + result.stderr
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    line = next(n for n, text in enumerate(EVICT_LAST.lstrip("\n").splitlines(), 1)
                if "evict_last" in text)
    assert rungs["static"]["figures"]["l2_hints"] == [f"evict_last (line {line})"]
    assert rungs["benchmark"]["figures"]["l2_hints"] == [f"evict_last (line {line})"]
    agent = krung("run", scale_problem, version("plain", EVICT_LAST.replace(
        ', eviction_policy="evict_last"', "")), "--format", "agent", "--rungs",
                  "static,compile,run,correctness,benchmark")
    assert agent.code == 0 and "l2_hints" not in agent.stdout, agent.stdout


@pytest.mark.gpu
@pytest.mark.over_budget  # a cold judge, Triton's compile and the benchmark on a GPU: 42 s
def test_on_a_gpu_l2_eviction_hints_are_said_beside_the_times(krung, scale_problem, version):
    """On the H200 (issue 31, item 6): the hinted Triton kernel compiles, is timed under the L2
    flush and passes, and the benchmark names the hint beside its times
    (benchmarks/evict_last.py measures whether the hint outlives the flush)."""
    result = krung("run", scale_problem, version("evict_last", EVICT_LAST), "--device", "cuda",
                   "--json", "--rungs", "static,compile,run,correctness,benchmark")
    assert result.code == 0, result.stdout + result.stderr
    bench = {r["name"]: r for r in result.json()["rungs"]}["benchmark"]["figures"]
    assert [hint.split(" ")[0] for hint in bench["l2_hints"]] == ["evict_last"], bench
    assert bench["timer"] == "cupti", bench


def test_a_known_librarys_kernel_pasted_into_a_version_is_named(krung, scale_problem, version):
    """A kernel as torch.compile's Inductor writes it, pasted in and renamed nowhere: the
    static rung names it and its library; the same kernel under a name of its own is not."""
    pasted = EVICT_LAST.replace("_scale", "triton_poi_fused_add_mul_0").replace(
        ', eviction_policy="evict_last"', "")
    result = krung("run", scale_problem, version("pasted", pasted), "--json", "--rungs", "static")
    assert result.code == 0, result.stdout + result.stderr
    static = result.json()["rungs"][0]["figures"]
    assert static["pasted_kernels"] == [
        "triton_poi_fused_add_mul_0 (line 7): torch.compile's Inductor output"], static
    agent = krung("run", scale_problem, version("pasted", pasted), "--format", "agent",
                  "--rungs", "static")
    assert "triton_poi_fused_add_mul_0 (line 7)" in agent.stdout, agent.stdout
    own = krung("run", scale_problem, version("own", EVICT_LAST), "--json", "--rungs", "static")
    assert "pasted_kernels" not in own.json()["rungs"][0]["figures"]


BIG_INPUT_PROBLEM = '''
import torch

description = "y = 2x + 1, one large case"


def reference(x):
    return x * 2 + 1


def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], generator=g, device=device),)


test_cases = [{"n": (1 << 24) + 3, "dtype": "float32"}]
bench_cases = test_cases


def flops(case):
    return 2 * case["n"]


def bytes_moved(case):
    return 8 * case["n"]
'''

# At import the version caps its process's address space a little above what it uses: the
# worker can answer, but not allocate the 64 MiB input of the first call it is sent.
NO_ROOM_FOR_INPUTS = """
import resource

with open("/proc/self/status") as status:
    used = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (used + (48 << 20), resource.RLIM_INFINITY))


def kernel(x):
    return x * 2 + 1
"""


def test_a_worker_that_cannot_take_a_request_says_why(krung, tmp_path, version):
    """A worker that cannot allocate a request's inputs says so and ends while the judge is
    still sending them: the rung reports what the worker said, not a worker that exited with
    status 0."""
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "problem.py").write_text(BIG_INPUT_PROBLEM)
    result = krung("run", tmp_path / "big", version("no_room", NO_ROOM_FOR_INPUTS), "--json",
                   "--rungs", "static,compile,run")
    assert result.code == 1, result.stdout + result.stderr
    run = {r["name"]: r for r in result.json()["rungs"]}["run"]
    assert run["status"] == "failed" and run["error_type"] != "WorkerCrashed", run
    assert "could not take the request" in run["error"], run
    assert "allocate" in run["error"], run  # what the worker said, not how it ended


NAMED_LIKE_KRUNGS_FAILURE = """
class InternalError(Exception):
    pass


def kernel(x):
    raise InternalError("the judge's own code raised, honest")
"""


def test_a_version_cannot_pass_its_failure_off_as_krungs(krung, scale_problem, version):
    """krung's own failure (InternalError) is retried and reported as an error; an exception
    class of the version's named the same fails the version, once."""
    result = krung("run", scale_problem, version("named_like_krung", NAMED_LIKE_KRUNGS_FAILURE),
                   "--json", "--rungs", "static,compile,run")
    assert result.code == 1, result.stdout + result.stderr
    run = result.json()
    assert run["outcome"] == "failed" and not run["env"].get("first_try"), run["env"]
    failed = {r["name"]: r for r in run["rungs"]}["run"]
    assert failed["error_type"] == "InternalError (the version's)", failed
