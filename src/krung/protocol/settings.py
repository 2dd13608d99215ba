"""Every setting krung reads, each declared once: one field of `Settings` holds its type, its
default, its environment variable, what it means and the rule its values follow.

Command-line options and `evaluate()` arguments override these (krung.host.options says which
option overrides which setting); nothing else in krung reads the environment for its own
settings. docs/settings.md is made from these declarations:
`python -m krung.host.options --markdown > docs/settings.md`.

To add a setting, add one field below with `setting(default, "KRUNG_NAME", "what it means")`
(and a `check` when its values follow a rule beyond the type's).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krung.protocol.errors import UsageError

DEVICES = ("auto", "cpu", "cuda")
PROFILE_SETS = ("fast", "full")
SERVICE_MODES = ("auto", "on", "off")
INPUT_CHANGE_MODES = ("cpu", "on", "off")
FORK_WORKER_MODES = ("cpu", "on", "off")
CLOCK_CONTROLS = ("none", "base")
DEFAULT_STORE = Path(".krung") / "krung.db"

# check(source, raw, value): raise UsageError when `value` (parsed from `raw`, given by
# `source`: the environment variable or the option) breaks the setting's rule.
Check = Callable[[str, object, Any], None]


@dataclass(frozen=True)
class Declared:
    """What a setting is, besides its name, type and default (those are the field's)."""

    env: str
    help: str
    check: Check | None = None
    zero: bool = False  # a number that may be 0 (it turns the setting's work off)


def setting(default: Any, env: str, help: str, check: Check | None = None,
            zero: bool = False) -> Any:
    """One setting's declaration, as a field of `Settings`."""
    return dataclasses.field(default=default,
                             metadata={"setting": Declared(env, help, check, zero)})


def one_of(values: tuple[str, ...], what: str, hint: str | None = None) -> Check:
    def check(source: str, raw: object, value: Any) -> None:
        if value not in values:
            raise UsageError(f"{source}={raw!r} is not {what}",
                             hint=hint or f"use one of: {', '.join(values)}")
    return check


def at_most(limit: float, above: str, hint: str) -> Check:
    """A number no larger than `limit`; `above` ends the message, `hint` says what to set
    (both may name {source})."""
    def check(source: str, raw: object, value: Any) -> None:
        if value > limit:
            raise UsageError(f"{source}={raw!r} {above}", hint=hint.format(source=source))
    return check


def module_names(source: str, raw: object, value: Any) -> None:
    if not all(part.strip() and all(p.isidentifier() for p in part.strip().split("."))
               for part in str(value).split(",")):
        raise UsageError(f"{source}={raw!r} is not a list of module names",
                         hint=f"set {source} to modules separated by commas, e.g. "
                              "my_rungs.toy,my_rungs.other")


def names(what: str, example: str) -> Check:
    """Comma-separated names: Python's dotted names, torch's `aten::op.overload`."""
    def check(source: str, raw: object, value: Any) -> None:
        parts = [p.strip() for p in str(value).split(",") if p.strip()]
        if not all(p.replace("::", ".").replace(".", "_").isidentifier() for p in parts):
            raise UsageError(f"{source}={raw!r} is not a list of {what}",
                             hint=f"set {source} to {what} separated by commas, e.g. {example}")
    return check


def name_list(value: str) -> tuple[str, ...]:
    """The names of a comma-separated setting (`forbid`, `forbid_ops`)."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass(frozen=True)
class Settings:
    """Every setting, with its default; `from_env` reads them, `replace` overrides them."""

    store: Path = setting(  # noqa: RUF009 (a Path is immutable)
        DEFAULT_STORE, "KRUNG_STORE",
        "SQLite file of the run store; each run's files go to runs/<id>/ beside it (the "
        "worker's and the judge's logs, the version as it was evaluated)")
    device: str = setting(
        "auto", "KRUNG_DEVICE", "auto, cpu or cuda; auto takes CUDA when torch sees a GPU",
        one_of(DEVICES, "a device krung knows"))
    seeds: int = setting(3, "KRUNG_SEEDS", "seeds per test case in the correctness rung")
    cpu_check_budget_s: float = setting(
        1.5, "KRUNG_CPU_CHECK_BUDGET",
        "seconds of the worker's CPU time the correctness rung aims to spend on a CPU "
        "(Triton's interpreter): cases are shrunk to fit, keeping what Triton specialises on "
        "and never below 2048 elements, and the determinism rung "
        "takes a case that fits a quarter of it; 0 checks every case as declared",
        zero=True)
    compile_timeout_s: float = setting(180.0, "KRUNG_COMPILE_TIMEOUT",
                                       "seconds for import + first call")
    call_timeout_s: float = setting(120.0, "KRUNG_CALL_TIMEOUT",
                                    "seconds for one call of the version")
    bench_timeout_s: float = setting(300.0, "KRUNG_BENCH_TIMEOUT",
                                     "seconds for timing one bench case")
    heartbeat_s: float = setting(
        5.0, "KRUNG_HEARTBEAT",
        "seconds after which the judge, busy in one step, repeats its last progress message "
        "with the time since (at most 15: its caller takes 45 s of silence for a hung judge)",
        at_most(15, "is above 15 s, the caller's silence limit is 45 s",
                "set {source} to a number of seconds in (0, 15], e.g. 5"))
    run_timeout_s: float = setting(
        1800.0, "KRUNG_RUN_TIMEOUT",
        "seconds for a whole evaluation, both tries included: past it the judge and its "
        "worker are stopped and the run is recorded as krung's error with the step it was "
        "at (a suite goes on with the next problem)")
    cuda_ipc: bool = setting(True, "KRUNG_CUDA_IPC",
                             "1 to pass GPU tensors between processes by CUDA IPC, 0 to copy "
                             "them through host memory")
    sanitize: bool = setting(False, "KRUNG_SANITIZE",
                             "1 to run the version under compute-sanitizer in the determinism "
                             "rung (GPU; slow)")
    max_file_bytes: int = setting(1 << 30, "KRUNG_MAX_FILE_BYTES",
                                  "largest file the version's process may write (its log "
                                  "too): a print flood ends there")
    artifacts_arch: str = setting("auto", "KRUNG_ARTIFACTS_ARCH",
                                  "GPU architecture the artifacts rung compiles for where no "
                                  "GPU is in use (auto: the GPU's, else sm_90a)")
    profile_clock_control: str = setting(
        "none", "KRUNG_PROFILE_CLOCK_CONTROL",
        "ncu --clock-control in the profile rung: none (the GPU's own clocks) or base "
        "(locked)",
        one_of(CLOCK_CONTROLS, "an ncu clock control",
               "use none (the GPU's own clocks) or base (locked base clocks)"))
    profile_source_counters: bool = setting(False, "KRUNG_PROFILE_SOURCE_COUNTERS",
                                            "1 to add ncu's SourceCounters section (slower)")
    profile_timeout_s: float = setting(60.0, "KRUNG_PROFILE_TIMEOUT",
                                       "seconds for the whole profile rung (ncu's start, the "
                                       "version's load and call, the report); past it ncu is "
                                       "killed and the rung fails")
    profile_set: str = setting(
        "fast", "KRUNG_PROFILE_SET",
        "ncu sections in the profile rung: fast (what krung's summary and the roofline's "
        "limiter read) or full (adds MemoryWorkloadAnalysis)",
        one_of(PROFILE_SETS, "a profile set krung knows",
               "use fast (the sections krung reads) or full (adds ncu's "
               "MemoryWorkloadAnalysis; slower)"))
    roofline_threshold_pct: float = setting(
        90.0, "KRUNG_ROOFLINE_THRESHOLD",
        "% of the binding roofline ceiling a bench case must reach to count as at the "
        "roofline (at most 100)",
        at_most(100, "is above 100%", "set {source} to a percentage in (0, 100], e.g. 90"))
    compiled_baseline: bool = setting(False, "KRUNG_COMPILED_BASELINE",
                                      "1 to time torch.compile(reference) too in the "
                                      "benchmark rung and give the speedup against it")
    timed_input_changes: str = setting(
        "on", "KRUNG_TIMED_INPUT_CHANGES",
        "a few input elements changed before every timed call, the outputs checked on them, "
        "so no cache keyed on input values survives the benchmark: on (everywhere, the "
        "default), cpu (on a CPU only) or off",
        one_of(INPUT_CHANGE_MODES, "a mode of the timed input changes"))
    value_stress: str = setting(
        "cpu", "KRUNG_VALUE_STRESS",
        "checked calls on inputs whose values leave the generator's distribution (scaled, "
        "ramped, sorted, tied, skewed indices: krung.judge.problem.value_stress), so a "
        "version right only on the generator's values fails: cpu (on a CPU only, the "
        "default until it passes the GPU gate), on (everywhere) or off",
        one_of(INPUT_CHANGE_MODES, "a mode of the value stress"))
    sandbox: str = setting(
        "cpu", "KRUNG_SANDBOX",
        "the walls a worker raises before importing the version (Landlock: it writes only to "
        "its scratch folder, the version's own compile caches and the run's folders it is "
        "given; seccomp: no IP sockets; on a CPU, the store hidden in a mount namespace of "
        "its own): cpu (CPU workers only, the default until the GPU stack is measured "
        "under them on the H200), on (everywhere) or off; the allow-listed environment and "
        "the scratch folder hold in every mode",
        one_of(INPUT_CHANGE_MODES, "a mode of the worker's sandbox"))
    scale: float = setting(
        1.0, "KRUNG_SCALE",
        "a factor in (0, 1] for a problem's sizes: 0.1 runs KernelBench's size constants and "
        "the varying sizes of GPU MODE's cases at a tenth, so the CPU loop works on them; "
        "runs record it and name the problem NAME@scale0.1",
        at_most(1, "is above 1: the scale makes a problem smaller",
                "set {source} to a factor in (0, 1], e.g. 0.1"))
    service: str = setting(
        "auto", "KRUNG_SERVICE",
        "the warm evaluation service beside the store: auto (use one that runs), on (start "
        "one if none runs; it exits when idle), off (a fresh judge every time)",
        one_of(SERVICE_MODES, "a service mode"))
    fork_worker: str = setting(
        "cpu", "KRUNG_FORK_WORKER",
        "workers forked from a copy of the judge made before it imports anything of its own "
        "(torch imported once per evaluation instead of twice; krung.worker.zygote): cpu (CPU "
        "workers only, the default until the GPU gate has run it), on (everywhere) or off "
        "(every worker a fresh interpreter)",
        one_of(FORK_WORKER_MODES, "a mode of the worker's start"))
    judge_forks: str = setting(
        "", "KRUNG_JUDGE_FORKS",
        "the socket of a judge fork server (`python -m krung.judge.forks --socket PATH`): a "
        "CPU evaluation's judge is forked from that process, which imported torch once, "
        "instead of started (about 1.5 s of CPU saved each; the tests run one per test "
        "process); GPU judges always start. Empty: none")
    forbid: str = setting(
        "", "KRUNG_FORBID",
        "Python names the version must not use, comma-separated (torch.matmul,torch.mm), "
        "besides the problem's own `forbid` (static rung, ForbiddenName)",
        names("Python names", "torch.matmul,torch.mm"))
    forbid_ops: str = setting(
        "", "KRUNG_FORBID_OPS",
        "torch operators the version's checked calls must not run, comma-separated (mm,"
        "addmm,bmm), besides the problem's own `forbid_ops` (traced; ForbiddenOp)",
        names("torch operator names", "mm,addmm,bmm"))
    require_own_kernel: bool = setting(
        False, "KRUNG_REQUIRE_OWN_KERNEL",
        "1: a version that launches no kernel of its own in a checked call (only torch's "
        "operators: `delegated`) fails the correctness rung (Delegated)")
    inputs_on_device: bool = setting(
        True, "KRUNG_INPUTS_ON_DEVICE",
        "KernelBench's get_inputs() drawn on the GPU (torch's default device for the call; a "
        "get_inputs() that cannot is drawn on the CPU, one that runs out of GPU memory is "
        "krung's error, not drawn again): milliseconds where a declared-size "
        "input took seconds of CPU in every rung; 0 to draw on the CPU (other values, so "
        "the same seed gives other inputs than a CPU run's)")
    kernel_census: bool = setting(
        True, "KRUNG_KERNEL_CENSUS",
        "1 to name every kernel a traced checked call and the reference ran on a GPU "
        "(CUPTI: the delegation check's evidence for CUDA C++, CuTeDSL, TileLang kernels); 0 "
        "leaves those names unknown. A second try after krung's own crash runs with it off")
    library_kernels: bool = setting(
        True, "KRUNG_LIBRARY_KERNELS",
        "count the vendor-library kernels a GPU ran (cuBLAS, cuBLASLt, cuDNN, cuFFT, by the "
        "names CUPTI reports) as work handed to a library, not the version's own: a token "
        "kernel beside cuBLAS's gemm is delegated; 0 counts only the reference's kernels so")
    graded: bool = setting(
        False, "KRUNG_GRADED",
        "1: every run is graded (krung run --graded; the MCP server's default): the "
        "problem's files must match their pin (krung pin), no seed may be chosen, no "
        "setting may weaken a check and the ladder holds correctness (docs/trust.md)")
    extra_rungs: str = setting(
        "", "KRUNG_EXTRA_RUNGS",
        "rungs of your own: comma-separated modules, importable on PYTHONPATH, each declaring "
        "SPEC and run(ctx) (docs/rungs.md); read by the host and the judge from the "
        "environment", module_names)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field, declared in declarations():
            raw = env.get(declared.env)
            if raw is None or raw == "":
                continue
            values[field.name] = parse(field.name, declared.env, raw)
        return cls(**values)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> Settings:
        """These settings with `changes` (None changes nothing), each checked as the
        option `--name-of-the-setting` would be."""
        return self.overridden(changes, {k: f"--{k.replace('_', '-')}" for k in changes})

    def overridden(self, changes: Mapping[str, object], sources: Mapping[str, str]) -> Settings:
        """These settings with `changes` (None changes nothing), each checked and named in
        an error as `sources` names it (the option that gave it)."""
        checked = {k: parse(k, sources[k], v) for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **checked)  # type: ignore[arg-type]


def declarations() -> Iterator[tuple[dataclasses.Field, Declared]]:
    """Every setting's field and declaration, in the order declared."""
    for field in dataclasses.fields(Settings):
        yield field, field.metadata["setting"]


def declared(name: str) -> Declared:
    return Settings.__dataclass_fields__[name].metadata["setting"]


@functools.cache
def kind_of(name: str) -> type:
    """The setting's type: Path, bool, int, float or str."""
    return typing.get_type_hints(Settings)[name]


def parse(name: str, source: str, raw: object) -> object:
    """The value of setting `name` given as `raw` by `source`, or UsageError naming the
    source and the value it expects."""
    kind = kind_of(name)
    zero = declared(name).zero
    try:
        value: Any = _positive(kind, zero)(raw) if zero else _PARSERS[kind](raw)
    except (TypeError, ValueError):
        raise UsageError(
            f"{source}={raw!r} is not a valid {kind.__name__}",
            hint=f"set {source} to a {'' if zero else 'positive '}{kind.__name__}"
                 f"{' (0 or more)' if zero else ''} ({declared(name).help})",
        ) from None
    check = declared(name).check
    if check is not None:
        check(source, raw, value)
    return value


def _positive(kind: type, zero: bool = False) -> Callable[[object], object]:
    def parse(raw: object) -> object:
        value = kind(raw)
        if not (value > 0 or (zero and value == 0)):
            raise ValueError
        return value
    return parse


def _bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("0", "1", "true", "false", "yes", "no"):
        raise ValueError
    return text in ("1", "true", "yes")


_PARSERS: dict[type, Callable[[object], object]] = {
    Path: Path, bool: _bool, int: _positive(int), float: _positive(float), str: str,
}


def markdown() -> list[str]:
    """The settings as rows of docs/settings.md's table."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for field, declared_ in declarations():
        rows.append(f"| `{declared_.env}` | {shown_default(field.default)} | "
                    f"{markdown_cell(declared_.help)} |")
    return rows


def markdown_cell(text: str) -> str:
    """`text` as one cell of a Markdown table."""
    return text.replace("|", "&#124;").replace("<", "&lt;")


def shown_default(value: object) -> str:
    """A default as the environment variable would give it."""
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`" if value != "" else "(none)"
