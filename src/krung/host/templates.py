"""The text of the files `krung init` writes: a first version per DSL, and the agent's guide.

Markers are `{{name}}` (filled by `fill`), so the C++ and Python braces stay as they are.
Each first version holds an elementwise example kernel (SiLU, the operation of the template
problem): with the template problem `kernel` calls it; with any other problem `kernel` has
the reference's signature and raises NotImplementedError where the real kernel goes.
"""

from __future__ import annotations

import json
import re

DSL_NAMES = {
    "triton": "Triton",
    "cuda": "CUDA C++ (torch.utils.cpp_extension.load_inline)",
    "cutedsl": "CuTeDSL (CUTLASS's Python DSL)",
    "tilelang": "TileLang",
}
DSL_SHORT = {"triton": "Triton", "cuda": "CUDA C++", "cutedsl": "CuTeDSL", "tilelang": "TileLang"}
# What to add to context/ first, for each DSL.
CONTEXT_HINTS = {
    "triton": "krung context add --package triton",
    "cuda": "krung context add cutlass https://github.com/NVIDIA/cutlass",
    "cutedsl": "krung context add --package cutlass",
    "tilelang": "krung context add --package tilelang",
}


def fill(template: str, **values: str) -> str:
    def value(match: re.Match) -> str:
        return values[match.group(1)]

    return re.sub(r"\{\{(\w+)\}\}", value, template)


CHECKS = """\
What krung checks, rung by rung: static (the file parses, defines `kernel`, does not import the
problem), compile (it imports, and its first call compiles), run (the first test case runs; the
outputs have the reference's count, dtype, shape and device), correctness (every test case, on
fresh random inputs with several seeds, within the problem's tolerance) and benchmark (this
version and the reference, timed the same way; speedup = reference time / this version's).

Run it from the workspace: krung run {{problem_dir}} versions/v1.py --format agent"""

SKELETON_ENTRY = '''\
def kernel({{signature}}):
    # TODO: allocate the output(s) (torch.empty, with the dtype, shape and device the reference
    # returns), launch your kernel on the inputs, and return the output(s). The example above
    # shows the pattern for one elementwise input.
    raise NotImplementedError(
        "versions/v1.py is a skeleton: write the kernel for {{problem}} in a new file, "
        "versions/v2.py, starting from this one")
'''

TRITON = '''\
"""{{title}}, version 1, in Triton: one program per block of elements, math in float32.

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs. On a GPU they are CUDA tensors and the first
call JIT-compiles the @triton.jit function; on a machine without a GPU they are CPU tensors and
the kernel runs under Triton's interpreter (TRITON_INTERPRET=1): slow, but the same logic.
{{state}}
{{checks}}
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # One program per BLOCK elements; the mask covers the ragged end.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def silu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    BLOCK = 1024
    _silu[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
    return y


{{entry}}'''

CUDA = '''\
"""{{title}}, version 1, in CUDA C++ built with torch.utils.cpp_extension.load_inline.

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs, CUDA tensors. The first call compiles
CUDA_SOURCE with nvcc (krung builds it in a cache by its store, keyed by the source and flags,
so an unchanged source is built once) and launches it. Running it needs an NVIDIA GPU, nvcc,
ninja and a CUDA build of torch; on a machine without a GPU, krung's compile rung compiles
CUDA_SOURCE for sm_90a with nvcc (errors at the line of this file), and does not run it.
{{state}}
{{checks}}
"""

import functools
import hashlib

import torch
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>

// One thread per element, math in float32, for float32, float16 and bfloat16 tensors.
template <typename scalar_t>
__global__ void silu_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y,
                            int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = static_cast<float>(x[i]);
        y[i] = static_cast<scalar_t>(v / (1.0f + __expf(-v)));
    }
}

torch::Tensor silu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "silu: x must be a CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return y;
    const int threads = 256;
    const auto blocks = static_cast<unsigned int>((n + threads - 1) / threads);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16,
                                    xc.scalar_type(), "silu", [&] {
        // torch's default stream, the one krung calls on (only torch's CPU-independent
        // headers here, so krung can compile this for sm_90a on a machine without a GPU)
        silu_kernel<scalar_t><<<blocks, threads>>>(xc.data_ptr<scalar_t>(),
                                                   y.data_ptr<scalar_t>(), n);
    });
    const cudaError_t launched = cudaGetLastError();
    TORCH_CHECK(launched == cudaSuccess, "silu: ", cudaGetErrorString(launched));
    return y;
}
"""
CPP_SOURCE = "torch::Tensor silu(torch::Tensor x);"  # what the Python binding exposes


@functools.cache
def _module():
    if not torch.cuda.is_available():
        raise RuntimeError("this CUDA C++ version needs an NVIDIA GPU and a CUDA build of torch, "
                           "and torch sees no GPU here: run it on a GPU machine")
    # A name per source: each version gets its own build, and none waits on another's lock.
    name = "krung_" + hashlib.sha256((CPP_SOURCE + CUDA_SOURCE).encode()).hexdigest()[:16]
    return load_inline(name=name, cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                       functions=["silu"], extra_cuda_cflags=["-O3"])


def silu(x):
    return _module().silu(x)


{{entry}}'''

CUTEDSL = '''\
"""{{title}}, version 1, in CuTeDSL (CUTLASS's Python DSL, pip package nvidia-cutlass-dsl).

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs, CUDA tensors. A @cute.kernel function is the
GPU code; a @cute.jit function launches it; `cute.compile` compiles that for the inputs' dtype
on first use (cached here, one compile per dtype: the layouts are marked dynamic, so sizes do
not recompile). It needs an NVIDIA GPU and nvidia-cutlass-dsl; without them the compile rung
fails and says so.
{{state}}
{{checks}}
"""

import functools

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def silu_kernel(gX: cute.Tensor, gY: cute.Tensor, n: cutlass.Int32):
    # One thread per element of the flattened tensors, math in float32.
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    if i < n:
        v = cutlass.Float32(gX[i])  # a numeric type converts the value it is called on
        gY[i] = gY.element_type(v / (1.0 + cute.math.exp(-v)))


@cute.jit
def silu_launch(mX: cute.Tensor, mY: cute.Tensor, n: cutlass.Int32):
    blocks = (n + THREADS - 1) // THREADS
    silu_kernel(mX, mY, n).launch(grid=(blocks, 1, 1), block=(THREADS, 1, 1))


@functools.cache
def _compiled(dtype: torch.dtype):
    x = torch.ones(THREADS, dtype=dtype, device="cuda")  # any size: the layout is dynamic
    return cute.compile(silu_launch, _view(x), _view(torch.empty_like(x)), x.numel())


def _view(t: torch.Tensor) -> cute.Tensor:
    return from_dlpack(t.reshape(-1)).mark_layout_dynamic()


def silu(x):
    if not torch.cuda.is_available():
        raise RuntimeError("this CuTeDSL version needs an NVIDIA GPU, and torch sees none "
                           "here: run it on a GPU machine")
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _compiled(x.dtype)(_view(x), _view(y), x.numel())
    return y


{{entry}}'''

TILELANG = '''\
"""{{title}}, version 1, in TileLang.

How it runs: krung imports this file in its own worker process and calls
`kernel({{signature}})` with the problem's inputs, CUDA tensors. `silu_program(n, dtype)`
builds a TileLang program (a T.prim_func); @tilelang.jit compiles it on first use for each
distinct (n, dtype) and caches it (for one build across sizes, make n symbolic with
T.dynamic). `out_idx=[-1]` makes the last tensor the output, allocated by TileLang and
returned. It needs an NVIDIA GPU and tilelang; without them the compile rung fails and says so.
{{state}}
{{checks}}
"""

import tilelang
import tilelang.language as T
import torch

BLOCK = 1024
THREADS = 256


@tilelang.jit(out_idx=[-1])
def silu_program(n, dtype, block=BLOCK, threads=THREADS):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        # One block of `threads` threads per BLOCK elements; T.Parallel spreads the loop over
        # the threads, and the guard covers the ragged end. Math in float32.
        with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
            for i in T.Parallel(block):
                idx = bx * block + i
                if idx < n:
                    v = T.cast(X[idx], "float32")
                    Y[idx] = T.cast(v / (1.0 + T.exp(-v)), dtype)

    return main


def silu(x):
    if not torch.cuda.is_available():
        raise RuntimeError("this TileLang version needs an NVIDIA GPU, and torch sees none "
                           "here: run it on a GPU machine")
    x = x.contiguous()
    if x.numel() == 0:
        return torch.empty_like(x)
    program = silu_program(x.numel(), str(x.dtype).removeprefix("torch."))
    return program(x.reshape(-1)).reshape(x.shape)


{{entry}}'''

VERSIONS = {"triton": TRITON, "cuda": CUDA, "cutedsl": CUTEDSL, "tilelang": TILELANG}

WORKING_ENTRY = '''\
def kernel(x):
    return silu(x)
'''

CLAUDE_MD = """\
# CLAUDE.md

Read AGENTS.md in this directory: it is the guide for this kernel workspace (the loop, the
exact krung commands, how to read the results, and the rules). It is imported here:

@AGENTS.md
"""



def mcp_json(command: list[str]) -> str:
    """`.mcp.json`: krung's MCP server for Claude Code, started as `command mcp`."""
    server = {"command": command[0], "args": [*command[1:], "mcp"]}
    return json.dumps({"mcpServers": {"krung": server}}, indent=2) + "\n"

GITIGNORE = """\
# krung's run store (SQLite) and each run's logs
.krung/
"""

AGENTS_MD = """\
# AGENTS.md: {{title}} in {{dsl_name}}

This directory is a krung workspace. You write GPU kernel versions for one problem, and
krung checks every version on a ladder of rungs (does it parse, compile, run, match the
reference, how fast is it) and records every run. Run every command below from this
directory, the one holding this file: the runs are stored in `.krung/krung.db` here.

## What is here

- `{{problem_dir}}/problem.py`: the problem. `reference(...)` is the slow, clear definition your
  kernel must match; `make_inputs(case, seed, device)` makes random inputs; `test_cases` are
  the sizes checked for correctness (awkward ones on purpose), `bench_cases` the sizes timed;
  `flops(case)` and `bytes_moved(case)` are the minimum work, for the roofline. Read it first.
- `versions/`: your versions, one file each.
{{v1_state}}
- `context/`: reference material (library sources, docs, examples). `context/INDEX.md` says
  what is there; search it with `krung context search QUERY`. Add to it with
  `{{context_hint}}`.
- `.mcp.json`: krung as an MCP server for Claude Code (see "MCP" below).

{{task}}

## The loop

1. Read `{{problem_dir}}/problem.py`, then `versions/v1.py`.
2. Check a version (every rung, recorded):

       krung run {{problem_dir}} versions/v1.py --format agent

3. Read the result (next section). If a rung failed, fix the cause in a new version file.
4. Once a version passes every rung, make it faster: write the next file (`versions/v2.py`,
   `versions/v3.py`, ...), one idea at a time, and run each one the same way, naming the run
   it builds on, so the history is a tree you can walk back:

       krung run {{problem_dir}} versions/v2.py --parent RUN_OF_V1 --format agent

   Every version climbs the correctness rungs again; a fast kernel that is wrong is worth
   nothing, so never report or build on a version whose correctness rung did not pass.
5. Compare versions:

       krung history {{problem_dir}}      # every run, newest first: verdict, time, speedup, % of roofline, parent
       krung best {{problem_dir}}         # the fastest version that passed every rung (--by roofline)
       krung show RUN             # one run again (its id, or a unique prefix), --source for its code
       krung report {{problem_dir}} -o report.html   # one HTML page: roofline chart, timeline, every version

6. Find out why it is slow: artifacts, profile and roofline (below), then back to 4. Stop
   when the roofline rung says `verdict=at-roofline`: then only less work can help.

While fixing a failure, leave the benchmark out to get answers sooner, then run the whole
ladder again before you count the version:

    krung run {{problem_dir}} versions/v2.py --rungs static,compile,run,correctness --format agent

Other forms:

    krung run {{problem_dir}} versions/v2.py --json    # the whole run as one JSON object
    krung watch {{problem_dir}} versions/v2.py         # again on every save (for a person at a terminal)
    krung context search "tl.dot" --max 20     # search context/ (file:line: text)

## Reading a result

The rungs, in order: {{rungs}}. Each prints one line when it finishes:

    [static] ok  dsl=triton  lines=35  sha256=71e29fe38959
    [compile] ok  import_s=1.043  first_call_s=0.059 ...
    [correctness] FAILED  Mismatch: 1/4 test cases fail; rows=3,cols=1000,dtype=float32 seed #0: ...; first mismatch at (2, 999): got 0, expected 0.731
        hint: some cases pass and others fail: compare their sizes; ...
        | mismatches by dimension: ...
    [benchmark] skipped  needs correctness, which failed

- `ok` is followed by the rung's figures as `key=value`.
- `FAILED` is followed by `Type: message` and, in brackets, the location (file:line in your
  version) where one is known; then `hint:` (the fix to try first) and `|` details. The type
  says what kind of failure it is: `SyntaxError`, `EntryPointMissing`, `ImportsReference`
  (static); a compiler's own error, such as Triton's `CompilationError` (compile; the
  location is the line in your version, with the source and a caret in the details);
  `OutputContract` (wrong count, dtype, shape or device of the outputs); `Mismatch`
  (correctness, with `failed_cases`, `first_mismatch` and `mismatch_region`); `Timeout`,
  `WorkerCrashed` (a hang, a segfault, an illegal memory access: the worker process was
  killed or died); or your own code's exception type.
- `skipped` is followed by why: a rung it needs failed, or this machine cannot climb it
  (the roofline needs a GPU); a rung skipped for the machine does not fail the run.
- correctness: `max_abs_err`, `max_rel_err`, `psnr_db`, `cossim` against the reference,
  computed in float64; a per-case table follows (passed, seeds, errors, mismatches). An
  element passes when |out - ref| <= atol + rtol * |ref| (the per-dtype policy).
- benchmark: a per-case table follows. `median_us` is the median time of one call of your
  version, in microseconds; `p10_us`/`p90_us` its spread; `ref_median_us` the reference's,
  timed the same way; `speedup` = ref_median_us / median_us, so above 1 is faster than the
  reference. The `[benchmark]` line's `geomean_us` and `speedup` are geometric means over the
  bench cases: compare versions by them, on the same device.
- The last line is the verdict: `OK  run ID: every rung passed` (or `every rung that could
  run passed (roofline skipped)` without a GPU), `FAILED  run ID: ... failed`, or `ERROR`
  (krung itself failed: run it again). The exit status is 0 when no rung failed, 1 when a
  rung failed, 2 for bad usage or a broken problem, 3 when krung failed.
- With `--format agent` each rung's line comes as it finishes (one line, no details), then,
  after a blank line, the summary: the verdict (`OK ...`, `FAILED at RUNG ...`, `ERROR ...`),
  the error, `where:` file:line, `hint:`, the figures that matter, and a `next:` line. A run
  stopped mid-way has printed every rung it finished.
- On a machine without a GPU the first line says `device: cpu`: Triton kernels run under
  Triton's interpreter on CPU tensors, and every time (`clock=cpu-wall`) is interpreter
  wall-clock time. Such times say nothing about GPU speed: there, only correctness counts;
  judge speed on a GPU machine (`--device cuda`). CUDA C++, CuTeDSL and TileLang versions
  need a GPU to run at all.

## Artifacts, profile, roofline

- Roofline (GPU): the `roofline` rung sets each bench case's time against the GPU's measured
  ceilings (`krung calibrate` prints them beside the datasheet): achieved TFLOP/s and GB/s,
  arithmetic intensity (flops / bytes_moved), the ceiling that binds (DRAM bandwidth, or the
  math peak of the case's dtype), `pct` of it, a verdict (`at-roofline` at 90% or more,
  else `below`) and the likely `limiter`. A time faster than the ceilings allow fails the
  rung as `SuspectTime`: the version skips work. A memory-bound kernel gets faster by moving
  fewer bytes (fuse, keep data in registers or shared memory, vectorise loads), not by doing
  less math.
- Artifacts and profile: what the compiler made (PTX, SASS, registers and shared memory per
  thread, spills) and what the GPU did (Nsight Compute). When `krung run --help` lists
  `artifacts`, `profile` or `roofline` among the rungs, run them in the ladder and read their
  lines like the others'. Until then, on a GPU machine: Triton keeps each compiled kernel's
  IR, PTX and cubin in its cache (`TRITON_CACHE_DIR`, default ~/.triton/cache), and
  `ncu --set full -o prof python script.py` profiles a script that calls `kernel` once.

## Rules

- Never edit anything under `{{problem_dir}}/`: not the reference, the inputs, the cases, the
  tolerance or the work counts. A version must not import the problem or call its reference
  (the static rung fails it).
- Write the kernel yourself, in {{dsl_short}}. Do not hand the core operation to torch,
  cuBLAS, cuDNN or another library (no `torch.matmul`, `@`, `torch.softmax`,
  `torch.nn.functional` and the like for the operation itself); torch is for allocating
  outputs, views and launching.
- Write each version as a new file: `versions/v2.py`, `versions/v3.py`, ... Never change a
  version that has been run: its run records its source hash, and the history must stay true.
- Re-check correctness for every version, on the whole ladder, before you claim anything
  about it. Do not special-case the test sizes, cache outputs between calls, or depend on the
  input values: inputs are fresh random tensors every run.
- Return new output tensors; do not write into the inputs.

## MCP

`krung mcp` serves krung's commands as MCP tools. Claude Code reads `.mcp.json` in this
directory. For Codex, add to `~/.codex/config.toml`:

    [mcp_servers.krung]
    command = {{mcp_command}}
    args = {{mcp_args}}

For Cursor, copy `.mcp.json` to `.cursor/mcp.json`. The command is the Python krung was
installed under (`python -m krung mcp`), so the server starts whether or not `krung` is on the
agent's PATH.

Start the agent in this directory, so the server finds `{{problem_dir}}/`, `versions/` and the store.
"""
