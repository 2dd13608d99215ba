"""Which Triton kernels a version launched, and how each was specialised: kept in the worker.

`install()` runs in the worker after the version is imported, and only when it imported
Triton. It wraps Triton's launch path so each launch is noted (and, per call, which kernels
ran and which errors came out of a launch: the worker reports the version's kernels that
never ran, and the errors it caught itself, krung.worker.guard.CallRecord):
- on a GPU, `JITFunction.run` returns the compiled kernel; krung keeps it, and its `asm`
  holds every stage Triton produced (TTIR, TTGIR, LLIR, PTX, CUBIN): exactly what ran;
- under the interpreter (CPU) nothing is compiled, so the launch's arguments are described
  (tensor dtypes and 16-byte alignment, integers by the classes Triton specialises on,
  constexpr values, launch options such as num_warps) for a separate process to compile the
  same specialisation for a GPU target (krung.judge.rungs.artifacts.triton_backend).

Stdlib only at import: this module loads into the lean worker.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import re
import time
from pathlib import Path
from typing import Any

MAX_KERNELS = 64  # distinct (kernel, specialisation) pairs kept; a version rarely has more
STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")

_log: LaunchLog | None = None


class LaunchLog:
    def __init__(self) -> None:
        self.described: dict[str, dict[str, Any]] = {}  # CPU: description key -> record
        self.compiled: dict[int, tuple[Any, Any, int]] = {}  # GPU: id -> (fn, kernel, count)
        # @triton.autotune: the config chosen per kernel and key; and, while the worker tunes
        # before timing (`recording`), the configs of those calls
        self.autotune: dict[str, dict[str, Any]] = {}
        self.recent: list[dict[str, Any]] = []
        self.recording = False
        self.noted: set[tuple[int, int]] = set()  # (tuner, config) pairs already noted
        self.tuning = 0  # >0 while an autotuner benchmarks its configs: not noted
        # Since the worker last asked (`take_call_record`): launches per kernel (keyed by the
        # id of its Python function), and the errors that came out of a launch or compile
        # (not while an autotuner tries configs, which may fail by design)
        self.ran: dict[int, int] = {}
        self.escaped: list[dict[str, Any]] = []

    def note_ran(self, fn: Any) -> None:
        key = id(fn)
        self.ran[key] = self.ran.get(key, 0) + 1

    def note_escaped(self, fn: Any, exc: BaseException) -> None:
        """An error out of one of `fn`'s launches (its compile too, on a GPU); if the call
        goes on to return, the version caught it."""
        if self.tuning or len(self.escaped) >= MAX_KERNELS:
            return
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        self.escaped.append({"type": type(exc).__name__, "message": first,
                             "kernel": getattr(fn, "__name__", "?")})

    def take_call_record(self) -> tuple[dict[int, int], list[dict[str, Any]]]:
        """The launches and escaped errors since the last time, and a fresh start."""
        ran, escaped = self.ran, self.escaped
        self.ran, self.escaped = {}, []
        return ran, escaped

    def needs_note(self, tuner: Any, tuned: bool) -> bool:
        """Whether an autotuned call is worth noting: it tuned, or chose a config not noted
        for this tuner yet, or the worker is recording. The rest (every timed call) costs a
        set lookup, not a record."""
        return tuned or self.recording or (id(tuner), id(tuner.best_config)) not in self.noted

    def note_autotune(self, tuner: Any, args: tuple, kwargs: dict, tuned: bool,
                      seconds: float) -> None:
        """The config `tuner` chose for this call's key (its shape arguments and dtypes)."""
        named = {**dict(zip(tuner.arg_names, args, strict=False)), **kwargs}
        named = {k: v for k, v in named.items() if k in tuner.arg_names}
        shape = {k: plain(named[k]) for k in tuner.keys if k in named}
        dtypes = [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
        key = tuple([named[k] for k in tuner.keys if k in named] + dtypes)
        config = tuner.cache.get(key, getattr(tuner, "best_config", None))
        if config is None:
            return
        chosen = {k: plain(v) for k, v in config.all_kwargs().items()
                  if v is not None and k != "ir_override"}
        name = getattr(tuner.base_fn, "__name__", "kernel")
        record = {"kernel": name, "key": shape, "dtypes": dtypes, "config": chosen,
                  "label": config_label(chosen), "configs": len(tuner.configs)}
        if tuned:  # tuned by this call
            record["tune_s"] = round(seconds, 3)
        held = self.autotune.get(json.dumps([name, shape, dtypes], default=str))
        if held is None and len(self.autotune) < MAX_KERNELS:
            self.autotune[json.dumps([name, shape, dtypes], default=str)] = record
        elif held is not None and "tune_s" in record:
            held.update(record)
        self.noted.add((id(tuner), id(config)))
        if self.recording:
            self.recent.append(record)

    def note_compiled(self, fn: Any, kernel: Any) -> None:
        if self.tuning:  # a config the autotuner tried, not the one it chose
            return
        key = id(kernel)
        held = self.compiled.get(key)
        if held is not None:
            self.compiled[key] = (fn, kernel, held[2] + 1)
        elif len(self.compiled) < MAX_KERNELS:
            self.compiled[key] = (fn, kernel, 1)

    def note_interpreted(self, fn: Any, args: tuple, kwargs: dict, grid: Any) -> None:
        if self.tuning:
            return
        names, constexprs = _parameters(fn)
        described = [describe(value, name in constexprs)
                     for name, value in zip(names, args, strict=False)]
        options = {}
        for key, value in kwargs.items():
            if key in names:
                described_value = describe(value, key in constexprs)
                options[key] = {"param": described_value}
            else:
                options[key] = describe(value, True)
        record = {"module": fn.__module__, "qualname": fn.__qualname__,
                  "name": fn.__name__, "file": fn.__code__.co_filename,
                  "line": fn.__code__.co_firstlineno, "args": described, "kwargs": options}
        key = json.dumps(record, sort_keys=True, default=str)
        held = self.described.get(key)
        if held is not None:
            held["launches"] += 1
        elif len(self.described) < MAX_KERNELS:
            self.described[key] = {**record, "launches": 1, "grid": _grid(grid, args, names, kwargs)}


def install() -> LaunchLog:
    """Wrap Triton's launch path (once per process) and return the log it writes to."""
    global _log
    if _log is not None:
        return _log
    _log = LaunchLog()
    log = _log
    from triton.runtime import interpreter, jit

    original_run = jit.JITFunction.run

    @functools.wraps(original_run)
    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            log.note_ran(self.fn)
        try:
            kernel = original_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        except BaseException as exc:  # a compile or launch error: noted, raised as it was
            log.note_escaped(self.fn, exc)
            raise
        if kernel is not None:
            with contextlib.suppress(Exception):  # noting is best effort: the launch goes on
                log.note_compiled(self, kernel)
        return kernel

    original_interpreted = interpreter.InterpretedFunction.run

    @functools.wraps(original_interpreted)
    def run_interpreted(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            log.note_ran(self.fn)
            with contextlib.suppress(Exception):  # as above
                log.note_interpreted(self.fn, args, kwargs, grid)
        try:
            return original_interpreted(self, *args, grid=grid, warmup=warmup, **kwargs)
        except BaseException as exc:  # as above
            log.note_escaped(self.fn, exc)
            raise

    jit.JITFunction.run = run
    interpreter.InterpretedFunction.run = run_interpreted
    _wrap_autotuner(log)
    return log


def _wrap_autotuner(log: LaunchLog) -> None:
    """Note the config each @triton.autotune call used, and keep the launches made while it
    benchmarks its configs out of the log: the artifacts are those of the chosen config."""
    from triton.runtime import autotuner

    original_run = autotuner.Autotuner.run
    original_bench = autotuner.Autotuner._bench

    @functools.wraps(original_run)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        size = len(self.cache)
        start = time.perf_counter()
        result = original_run(self, *args, **kwargs)
        tuned = len(self.cache) > size
        if log.needs_note(self, tuned):
            with contextlib.suppress(Exception):  # noting is best effort: the launch went on
                log.note_autotune(self, args, kwargs, tuned, time.perf_counter() - start)
        return result

    @functools.wraps(original_bench)
    def bench(self: Any, *args: Any, **kwargs: Any) -> Any:
        log.tuning += 1
        try:
            return original_bench(self, *args, **kwargs)
        finally:
            log.tuning -= 1

    autotuner.Autotuner.run = run
    autotuner.Autotuner._bench = bench


def config_label(config: dict[str, Any]) -> str:
    """`BLOCK=256 num_warps=4 num_stages=3`: a chosen config as people write it."""
    return " ".join(f"{k}={v}" for k, v in config.items() if k != "num_ctas" or v != 1)


def current() -> LaunchLog | None:
    return _log


def describe(value: Any, constexpr: bool) -> Any:
    """An argument as JSON, keeping exactly what Triton specialises on and no more: a
    tensor's dtype and whether it is 16-byte aligned; an integer's width and whether it is
    1 or a multiple of 16 (a representative value of its class); a constexpr's value."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return {"tensor": str(value.dtype).removeprefix("torch."),
                "aligned": value.data_ptr() % 16 == 0}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if constexpr:
            return value
        return {"int": _representative(value)}
    if isinstance(value, float):
        return value if constexpr else {"float": 1.5}
    if isinstance(value, (tuple, list)):
        return {"tuple": [describe(v, constexpr) for v in value]}
    type_name = type(value).__name__
    if type_name == "dtype" and type(value).__module__.startswith("triton"):
        return {"tl_dtype": str(value)}
    if type_name == "constexpr":
        return describe(getattr(value, "value", None), True)
    return {"unsupported": f"{type(value).__module__}.{type_name}", "repr": repr(value)[:200]}


def _representative(value: int) -> int:
    """A value Triton specialises exactly like `value`: same width, same ==1 and %16 classes."""
    if value == 1:
        return 1
    base = 16 if value % 16 == 0 else 3
    if -(2**31) <= value < 2**31:
        return base
    low = 0 if base == 16 else 3
    return 2**40 + low if value < 2**63 else 2**63 + low


def _parameters(fn: Any) -> tuple[list[str], set[str]]:
    signature = inspect.signature(fn)
    names = list(signature.parameters)
    constexprs = {name for name, p in signature.parameters.items()
                  if "constexpr" in str(p.annotation)}
    return names, constexprs


def _grid(grid: Any, args: tuple, names: list[str],
          kwargs: dict[str, Any] | None = None) -> list[int] | None:
    """The launch grid as numbers; a callable grid gets the arguments and the launch's
    keyword arguments (meta-parameters such as BLOCK), as Triton gives them."""
    try:
        if callable(grid):
            grid = grid({**dict(zip(names, args, strict=False)), **(kwargs or {})})
        return [int(g) for g in grid]
    except Exception:  # a grid callable that needs the autotuner's meta-parameters
        return None


# Naming and writing a compiled kernel: shared by the worker (GPU) and the build process (CPU).


def specialisation(kernel: Any) -> dict[str, Any]:
    """What distinguishes one compiled specialisation of a kernel, as JSON."""
    src, meta = kernel.src, kernel.metadata
    names = list(src.signature)
    constants = {}
    for path, value in src.constants.items():
        index = path[0] if isinstance(path, tuple) else names.index(path)
        label = names[index] if index < len(names) else str(path)
        constants[label] = plain(value)
    attrs = {names[p[0]] if isinstance(p, tuple) and p[0] < len(names) else str(p): v
             for p, v in src.attrs.items() if v}
    declared = getattr(src.fn, "constexprs", None) or []  # params annotated tl.constexpr
    return {
        "kernel": kernel.name, "signature": {k: str(v) for k, v in src.signature.items()},
        "constexprs": [names[i] for i in declared if i < len(names)],
        "constants": constants, "attrs": json.loads(json.dumps(attrs, default=str)),
        "num_warps": meta.num_warps, "num_stages": meta.num_stages,
        "num_ctas": getattr(meta, "num_ctas", 1), "shared": meta.shared,
        "target": f"{meta.target.backend}:{meta.target.arch}",
    }


def specialisation_name(spec: dict[str, Any]) -> str:
    """A file name a person recognises: the constexprs, the pointers' element types and the
    launch options, then a short hash of everything else (alignment, integer classes) so no
    two collide: `BLOCK=1024_bf16_w4s3_0af984`."""
    declared = spec.get("constexprs") or []
    consts = ",".join(f"{k}={v}" for k, v in spec["constants"].items() if k in declared)
    pointed = dict.fromkeys(t[1:] for t in spec["signature"].values() if t.startswith("*"))
    digest = hashlib.sha256(json.dumps({k: spec[k] for k in (
        "signature", "constants", "attrs", "num_warps", "num_stages", "num_ctas", "target")},
        sort_keys=True, default=str).encode()).hexdigest()[:6]
    text = "_".join(filter(None, [consts[:120], "-".join(pointed)[:60],
                                  f"w{spec['num_warps']}s{spec['num_stages']}", digest]))
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "-", text)


def write_compiled(kernel: Any, out_dir: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """Write one compiled kernel's stages as `<out_dir>/<kernel>/<specialisation>.<stage>`
    with a `.json` beside them saying how it was specialised; return that record."""
    spec = specialisation(kernel)
    name = specialisation_name(spec)
    folder = out_dir / _safe(kernel.name)
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for stage in STAGES:
        if stage not in kernel.asm:
            continue
        data = kernel.asm[stage]
        path = folder / f"{name}.{stage}"
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
        files[stage] = path.name
    record = {**spec, **extra, "specialisation": name, "dsl": "triton",
              "threads_per_block": spec["num_warps"] * 32,
              "ptxas": _ptxas_path(spec["target"]), "files": files}
    (folder / f"{name}.json").write_text(json.dumps(record, indent=1, default=str))
    return record


def _ptxas_path(target: str) -> str | None:
    """The ptxas Triton itself uses for this target, so a report reads like its build."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        arch = int(target.rsplit(":", 1)[-1])
        return get_ptxas(arch).path
    except Exception:  # another backend, or an older Triton: krung's own choice will do
        return None


def plain(value: Any) -> Any:
    value = getattr(value, "value", value)
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:100] or "kernel"


def dump_compiled(log: LaunchLog, out_dir: Path) -> list[dict[str, Any]]:
    """GPU: write what every noted kernel compiled to, and return their records."""
    records = []
    for fn, kernel, launches in log.compiled.values():
        if hasattr(kernel, "result"):  # an async compile that has not been waited on
            kernel = kernel.result()
        extra = {"launches": launches, "module": fn.fn.__module__,
                 "qualname": fn.fn.__qualname__, "n_regs": getattr(kernel, "n_regs", None),
                 "n_spills": getattr(kernel, "n_spills", None), "source": "gpu"}
        records.append(write_compiled(kernel, out_dir, extra))
    return records
