"""Measuring the GPU's ceilings: what the roofline compares every version against.

Each figure is timed with krung.worker.timing.measure, the protocol the benchmark rung uses for
versions (CUPTI device time per call, L2 flushed before each call, median of the samples), so
a version and its ceiling are measured alike:

- DRAM: a device-to-device copy of a buffer far larger than the L2 (bytes read + written).
- L2: a Triton kernel in which every program streams a buffer a quarter of the L2's size,
  each from its own starting block, with loads that bypass the L1 (`.cg`): after the first
  touch every byte comes from the L2 (bytes read). Without Triton: copies between two buffers
  that fit in the L2, `L2_REPEATS` per call, less the time of one (bytes read + written).
- math: dense 8192^3 matrix products through cuBLAS (torch.mm) on random normal inputs, for
  fp32 (TF32 off), tf32, fp16 and bf16, and fp8 e4m3 through torch._scaled_mm with fast
  accumulation where the GPU has fp8 tensor cores (compute capability 8.9 and newer).
- the pipes outside the tensor cores (FP32 FMA, FP16 HFMA2, MUFU, INT32 IMAD) and shared
  memory: one small CUDA kernel each (krung.judge.rungs.roofline.pipe_kernels). A pipe that
  cannot be measured here gets the datasheet's figure, marked as such (`pipes_from`).

`python -m krung.judge.rungs.roofline.ceilings` reads `{"cache": [...], "force": bool}` on stdin and
prints, as its last line, the calibration for this device: a kept one with the same key, or
one measured now (`krung calibrate` runs it so that the caller never imports torch).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from krung.judge.rungs.roofline import pipe_kernels
from krung.protocol.results import dumps
from krung.worker.timing import TimingPlan, measure, summarise

PLAN = TimingPlan(warmup_s=0.3, max_s=1.0, min_samples=10, max_samples=1000, target_ci=0.005)
COPY_BYTES = 1 << 30  # per buffer; at most an eighth of the free memory
L2_REPEATS = 32
# Matmul sizes: the peak is the faster one. A short matmul runs before the board's power limit
# pulls the clock down, a long one under it (H200 bf16: 793 TFLOP/s at 4096^3, 665 at 8192^3);
# a kernel may reach the first, so a ceiling at the second would call it faster than possible.
MATMUL_SIZES = (4096, 8192)
HALF_PRECISIONS = {"fp16": "float16", "bf16": "bfloat16"}


def measure_ceilings() -> dict[str, Any]:
    """The ceilings of the current CUDA device, as a calibration record."""
    import torch

    from krung.judge.device import clock_state, clock_warning

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    before = clock_state()
    modes: set[str] = set()
    record: dict[str, Any] = {"l2_size_bytes": props.L2_cache_size, "flops_per_s": {},
                              "unsupported": {}}
    copy_bytes = _copy_bytes(props.L2_cache_size)
    record["dram_bytes_per_s"] = _copy_rate(copy_bytes, 1, modes)
    l2_bytes = _l2_bytes(props.L2_cache_size)
    try:
        record["l2_bytes_per_s"] = _l2_read_rate(l2_bytes, props.multi_processor_count, modes)
        l2_method = "Triton kernel streaming an L2-resident buffer, loads past the L1 (bytes read)"
    except Exception as exc:  # no Triton here, or it cannot compile: copies within the L2
        record["unsupported"]["l2_kernel"] = f"{type(exc).__name__}: {exc}"[:300]
        many = _copy_time_us(l2_bytes, L2_REPEATS, modes)
        one = _copy_time_us(l2_bytes, 1, modes)
        if many > one:
            record["l2_bytes_per_s"] = (L2_REPEATS - 1) * 2 * l2_bytes / ((many - one) * 1e-6)
        l2_method = f"{L2_REPEATS} copies within the L2 less one (bytes read + written)"
    for precision in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        try:
            record["flops_per_s"][precision] = _matmul_rate(precision, modes)
        except _Unsupported as exc:
            record["unsupported"][precision] = str(exc)
    record["pipes_per_s"], record["pipes_from"] = _pipe_rates(
        props.name, props.multi_processor_count, record["unsupported"], modes)
    after = clock_state()
    record["method"] = {
        "timer": ",".join(sorted(modes)), "statistic": "median device time per call, L2 "
        "flushed before each call", "dram_copy_bytes": copy_bytes, "l2_buffer_bytes": l2_bytes,
        "l2": l2_method,
        "matmul": f"the faster of {' and '.join(f'{n}^3' for n in MATMUL_SIZES)} torch.mm "
        "(cuBLAS), random normal inputs; fp8: torch._scaled_mm e4m3 x e4m3 -> bf16, fast "
        "accumulation",
        "pipes": {name: pipe_kernels.WHAT[name] for name in record["pipes_per_s"]},
    }
    record["clock"] = {"before": before, "after": after,
                       "warning": clock_warning(before, after)}
    record["device"] = {"name": props.name, "sm": f"{props.major}.{props.minor}",
                        "sms": props.multi_processor_count}
    torch.cuda.empty_cache()  # give back the buffers: the judge goes on with its own work
    return record


def _pipe_rates(device_name: str, sms: int, unsupported: dict[str, str],
                modes: set[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Each pipe's rate, measured, or the datasheet's where it could not be; and where each
    came from ("measured", or "datasheet: why")."""
    from krung.judge.device import datasheet_for

    failed: dict[str, str] = {}
    rates = pipe_kernels.measure_pipes(sms, lambda call: _time_us(call, modes), failed)
    sources = {name: "measured" for name in rates}
    sheet = datasheet_for(device_name)
    for name, why in failed.items():
        listed = sheet.pipes_per_s.get(name) if sheet else None
        if listed:
            rates[name] = listed
            sources[name] = f"datasheet ({why})"
        else:
            unsupported[name] = f"{why}; krung has no datasheet figure for this GPU"
    return rates, sources


class _Unsupported(Exception):
    """This GPU (or this torch) cannot run the measurement; the message says why."""


def _copy_bytes(l2_bytes: int) -> int:
    import torch

    free, _ = torch.cuda.mem_get_info()
    size = min(COPY_BYTES, free // 8)
    if size < 8 * l2_bytes:
        raise RuntimeError(f"only {free / 2**30:.1f} GiB of GPU memory is free: too little to "
                           "measure DRAM bandwidth past the L2")
    return size // (1 << 20) * (1 << 20)


def _l2_bytes(l2_size: int) -> int:
    """A buffer an eighth of the L2: two of them (a copy's) fit in a quarter of it."""
    return max(l2_size // 8 // (1 << 16) * (1 << 16), 1 << 16)


L2_BLOCK = 4096  # float32 elements a program loads per step (16 KiB)
L2_PROGRAMS_PER_SM = 4
L2_READ_BYTES = 4 << 30  # about this much read per call, so the ramp-up is negligible


def l2_read_kernel() -> Any:
    """The Triton kernel: program p reads blocks p, p+1, ... of `src` (wrapping), `steps`
    blocks in all, and writes its running sum so the loads cannot be dropped."""
    import triton
    import triton.language as tl

    @triton.jit
    def l2_read(src, out, blocks, steps, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offsets = tl.arange(0, BLOCK)
        total = tl.zeros([BLOCK], dtype=tl.float32)
        for step in range(steps):
            block = (pid + step) % blocks
            total += tl.load(src + block * BLOCK + offsets, cache_modifier=".cg")
        tl.store(out + pid * BLOCK + offsets, total)

    return l2_read


def _l2_read_rate(nbytes: int, sms: int, modes: set[str]) -> float:
    import torch

    kernel = l2_read_kernel()
    blocks = max(nbytes // (4 * L2_BLOCK), 1)
    programs = L2_PROGRAMS_PER_SM * sms
    steps = max(blocks, L2_READ_BYTES // (programs * 4 * L2_BLOCK))
    source = torch.randn(blocks * L2_BLOCK, device="cuda")
    out = torch.empty(programs * L2_BLOCK, device="cuda")

    def read() -> None:
        kernel[(programs,)](source, out, blocks, steps, BLOCK=L2_BLOCK, num_warps=8)

    read()  # compile it before the timing starts
    torch.cuda.synchronize()
    seconds = _time_us(read, modes) * 1e-6
    return programs * steps * L2_BLOCK * 4 / seconds


def _time_us(call: Callable[[], Any], modes: set[str]) -> float:
    samples = measure(lambda i: call(), 1, "cuda", PLAN)
    modes.add(samples.mode)
    return summarise(samples.device_us)["median_us"]


def _copy_time_us(nbytes: int, repeats: int, modes: set[str]) -> float:
    import torch

    source = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    target = torch.empty_like(source)

    def copies() -> None:
        for _ in range(repeats):
            target.copy_(source)

    return _time_us(copies, modes)


def _copy_rate(nbytes: int, repeats: int, modes: set[str]) -> float:
    return repeats * 2 * nbytes / (_copy_time_us(nbytes, repeats, modes) * 1e-6)


def _matmul_rate(precision: str, modes: set[str]) -> float:
    return max(_matmul_rate_at(n, precision, modes) for n in MATMUL_SIZES)


def _matmul_rate_at(n: int, precision: str, modes: set[str]) -> float:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=generator)
    b = torch.randn(n, n, device="cuda", generator=generator)
    if precision == "fp8":
        call = _fp8_matmul(a, b)
    else:
        if precision in HALF_PRECISIONS:
            dtype = getattr(torch, HALF_PRECISIONS[precision])
            a, b = a.to(dtype), b.to(dtype)
        out = torch.empty_like(a)

        def call() -> Any:
            return torch.mm(a, b, out=out)

    with _tf32(precision == "tf32"):
        seconds = _time_us(call, modes) * 1e-6
    return 2 * n**3 / seconds


def _fp8_matmul(a: Any, b: Any) -> Callable[[], Any]:
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9) or not hasattr(torch, "float8_e4m3fn"):
        raise _Unsupported(f"fp8 matmul needs compute capability 8.9 or newer; this GPU is "
                           f"{major}.{minor}")
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # cuBLAS wants B column-major
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def call() -> Any:
        return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                use_fast_accum=True)

    try:
        call()
        torch.cuda.synchronize()
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        raise _Unsupported(f"torch._scaled_mm failed here: {str(exc).splitlines()[0]}") from exc
    return call


@contextlib.contextmanager
def _tf32(allowed: bool) -> Iterator[None]:
    """cuBLAS float32 products with TF32 allowed or not, restoring the setting after (the
    judge computes references in the same process)."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def calibration_for(env: dict[str, Any], cache: list[dict[str, Any]],
                    force: bool = False) -> dict[str, Any]:
    """The kept calibration for this device (`cached` true), or one measured now."""
    from krung.judge.rungs.roofline.calibration import find, key_of

    key = key_of(env)
    found = None if force else find(cache, key)
    if found is not None:
        return {**found, "cached": True}
    return {"key": key, "record": measure_ceilings(), "measured_at": now(), "cached": False}


def main() -> None:
    text = sys.stdin.read() if not sys.stdin.isatty() else ""
    request = json.loads(text) if text.strip() else {}
    import torch

    if not torch.cuda.is_available():
        reply: dict[str, Any] = {
            "error": "calibration needs a CUDA GPU, and torch sees none",
            "hint": "run `krung calibrate` on the machine whose GPU you evaluate on (with a "
                    "CUDA build of torch); without a GPU there is no roofline"}
    else:
        from krung.judge import gpu_lock
        from krung.judge.serve import environment

        env = environment("cuda")
        try:  # never beside a benchmark: both would measure the other's work
            with gpu_lock.exclusive(gpu_lock.lock_path(env)):
                reply = calibration_for(env, request.get("cache") or [],
                                        bool(request.get("force")))
        except RuntimeError as exc:  # torch's CUDA errors, or too little free memory
            reply = {"error": f"the calibration failed: {exc}",
                     "hint": "free the GPU (nvidia-smi lists what holds it) and run "
                             "`krung calibrate` again"}
    sys.stdout.write(dumps(reply) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
