"""Every setting krung reads, declared once, typed, with its environment variable.

Command-line options and `evaluate()` arguments override these; nothing else in krung reads
the environment for its own settings.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from krung.protocol.errors import UsageError

DEVICES = ("auto", "cpu", "cuda")
PROFILE_SETS = ("fast", "full")
SERVICE_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class Setting:
    env: str
    help: str


_SETTINGS = {
    "store": Setting("KRUNG_STORE", "SQLite file of the run store (artifacts go beside it)"),
    "device": Setting("KRUNG_DEVICE", "auto, cpu or cuda; auto takes CUDA when torch sees a GPU"),
    "seeds": Setting("KRUNG_SEEDS", "seeds per test case in the correctness rung"),
    "compile_timeout_s": Setting("KRUNG_COMPILE_TIMEOUT", "seconds for import + first call"),
    "call_timeout_s": Setting("KRUNG_CALL_TIMEOUT", "seconds for one call of the version"),
    "bench_timeout_s": Setting("KRUNG_BENCH_TIMEOUT", "seconds for timing one bench case"),
    "max_file_bytes": Setting("KRUNG_MAX_FILE_BYTES", "largest file the version's process may "
                                                      "write (its log too): a print flood ends "
                                                      "there"),
    "sanitize": Setting("KRUNG_SANITIZE", "1 to run the version under compute-sanitizer in the "
                                          "determinism rung (GPU; slow)"),
    "artifacts_arch": Setting("KRUNG_ARTIFACTS_ARCH", "GPU architecture the artifacts rung "
                                                      "compiles for where no GPU is in use "
                                                      "(auto: the GPU's, else sm_90a)"),
    "profile_clock_control": Setting("KRUNG_PROFILE_CLOCK_CONTROL", "ncu --clock-control in "
                                                                    "the profile rung: none "
                                                                    "(the GPU's own clocks) or "
                                                                    "base (locked)"),
    "profile_source_counters": Setting("KRUNG_PROFILE_SOURCE_COUNTERS", "1 to add ncu's "
                                                                        "SourceCounters section "
                                                                        "(slower)"),
    "profile_timeout_s": Setting("KRUNG_PROFILE_TIMEOUT", "seconds for the whole profile rung "
                                                          "(ncu's start, the version's load and "
                                                          "call, the report); past it ncu is "
                                                          "killed and the rung fails"),
    "profile_set": Setting("KRUNG_PROFILE_SET", "ncu sections in the profile rung: fast (what "
                                                "krung's summary and the roofline's limiter "
                                                "read) or full (adds MemoryWorkloadAnalysis)"),
    "cuda_ipc": Setting("KRUNG_CUDA_IPC", "1 to pass GPU tensors between processes by CUDA IPC, "
                                          "0 to copy them through host memory"),
    "compiled_baseline": Setting("KRUNG_COMPILED_BASELINE", "1 to time torch.compile(reference) "
                                                            "too in the benchmark rung and give "
                                                            "the speedup against it"),
    "scale": Setting("KRUNG_SCALE", "a factor in (0, 1] for a problem's sizes: 0.1 runs "
                                    "KernelBench's size constants and the varying sizes of "
                                    "GPU MODE's cases at a tenth, so the CPU loop works on "
                                    "them; runs record it and name the problem NAME@scale0.1"),
    "roofline_threshold_pct": Setting("KRUNG_ROOFLINE_THRESHOLD",
                                      "% of the binding roofline ceiling a bench case must "
                                      "reach to count as at the roofline (at most 100)"),
    "service": Setting("KRUNG_SERVICE", "the warm evaluation service beside the store: auto "
                                        "(use one that runs), on (start one if none runs; it "
                                        "exits when idle), off (a fresh judge every time)"),
    "extra_rungs": Setting("KRUNG_EXTRA_RUNGS", "rungs of your own: comma-separated modules, "
                                                "importable on PYTHONPATH, each declaring SPEC "
                                                "and run(ctx) (docs/rungs.md); read by the "
                                                "host and the judge from the environment"),
}


@dataclass(frozen=True)
class Settings:
    store: Path = field(default_factory=lambda: Path(".krung") / "krung.db")
    device: str = "auto"
    seeds: int = 3
    compile_timeout_s: float = 180.0
    call_timeout_s: float = 120.0
    bench_timeout_s: float = 300.0
    cuda_ipc: bool = True
    sanitize: bool = False
    max_file_bytes: int = 1 << 30
    artifacts_arch: str = "auto"
    profile_clock_control: str = "none"
    profile_source_counters: bool = False
    profile_timeout_s: float = 60.0
    profile_set: str = "fast"
    roofline_threshold_pct: float = 90.0
    compiled_baseline: bool = False
    scale: float = 1.0
    service: str = "auto"
    extra_rungs: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name, setting in _SETTINGS.items():
            raw = env.get(setting.env)
            if raw is None or raw == "":
                continue
            values[name] = _parse(name, setting.env, raw)
        return cls(**values)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> Settings:
        checked = {k: _parse(k, f"--{k.replace('_', '-')}", v) for k, v in changes.items()
                   if v is not None}
        return dataclasses.replace(self, **checked)  # type: ignore[arg-type]


def _parse(name: str, source: str, raw: object) -> object:
    kind = Settings.__dataclass_fields__[name].type
    try:
        if kind == "Path":
            return Path(raw)  # type: ignore[arg-type]
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("0", "1", "true", "false", "yes", "no"):
                raise ValueError
            return text in ("1", "true", "yes")
        if kind == "int":
            value: object = int(raw)  # type: ignore[call-overload]
            if value <= 0:  # type: ignore[operator]
                raise ValueError
            return value
        if kind == "float":
            value = float(raw)  # type: ignore[arg-type]
            if not value > 0:  # type: ignore[operator]
                raise ValueError
            if name == "roofline_threshold_pct" and value > 100:  # type: ignore[operator]
                raise UsageError(f"{source}={raw!r} is above 100%",
                                 hint=f"set {source} to a percentage in (0, 100], e.g. 90")
            if name == "scale" and value > 1:  # type: ignore[operator]
                raise UsageError(f"{source}={raw!r} is above 1: the scale makes a problem "
                                 "smaller", hint=f"set {source} to a factor in (0, 1], e.g. 0.1")
            return value
    except (TypeError, ValueError):
        raise UsageError(
            f"{source}={raw!r} is not a valid {kind}",
            hint=f"set {source} to a positive {kind} ({_SETTINGS[name].help})",
        ) from None
    if name == "profile_clock_control" and raw not in ("none", "base"):
        raise UsageError(f"{source}={raw!r} is not an ncu clock control",
                         hint="use none (the GPU's own clocks) or base (locked base clocks)")
    if name == "profile_set" and raw not in PROFILE_SETS:
        raise UsageError(f"{source}={raw!r} is not a profile set krung knows",
                         hint="use fast (the sections krung reads) or full (adds ncu's "
                              "MemoryWorkloadAnalysis; slower)")
    if name == "service" and raw not in SERVICE_MODES:
        raise UsageError(f"{source}={raw!r} is not a service mode",
                         hint=f"use one of: {', '.join(SERVICE_MODES)}")
    if name == "extra_rungs" and not all(
            part.strip() and all(p.isidentifier() for p in part.strip().split("."))
            for part in str(raw).split(",")):
        raise UsageError(f"{source}={raw!r} is not a list of module names",
                         hint=f"set {source} to modules separated by commas, e.g. "
                              "my_rungs.toy,my_rungs.other")
    if name == "device" and raw not in DEVICES:
        raise UsageError(f"{source}={raw!r} is not a device krung knows",
                         hint=f"use one of: {', '.join(DEVICES)}")
    return raw
