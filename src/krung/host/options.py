"""Every option of a run, declared once: its name, type, default, help and the setting it
overrides. The typer options of `krung run`, `watch`, `batch` and `suite` and the fields of
the MCP server's `evaluate` and `profile` tools are made from these declarations (`takes`,
`tool_fields`), and docs/settings.md from them and the settings':
`python -m krung.host.options --markdown > docs/settings.md`.

To add an option, declare it in OPTIONS and name it in the tuple of each command that takes it.
"""

from __future__ import annotations

import enum
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer

from krung.protocol import settings as settings_module
from krung.protocol.settings import DEVICES, Settings

F = TypeVar("F", bound=Callable[..., Any])
REQUIRED = inspect.Parameter.empty


class OutputFormat(str, enum.Enum):
    TEXT = "text"
    JSON = "json"
    AGENT = "agent"


@dataclass(frozen=True)
class Option:
    """One option of a run, as the command line and the MCP tools take it."""

    name: str  # the parameter's name; the flag is --name with dashes unless `flag` says
    type: Any  # as the command line parses it
    default: Any
    help: str
    setting: str | None = None  # the field of Settings it overrides, if any
    flag: str | None = None
    tool_type: Any = None  # the MCP field's type, where it says more than `type`
    minimum: int | None = None  # the smallest number it takes

    @property
    def cli_flag(self) -> str:
        return self.flag or f"--{self.name.replace('_', '-')}"

    @property
    def described(self) -> str:
        """The help, with the setting it overrides and that setting's default."""
        if self.setting is None:
            return self.help
        declared = settings_module.declared(self.setting)
        default = Settings.__dataclass_fields__[self.setting].default
        return (f"{self.help.rstrip('.')} (default: ${declared.env}, else "
                f"{settings_module.shown_default(default).strip('`')}).")


def _built_in_rungs() -> dict[str, bool]:
    """The rungs krung ships, each with whether it is climbed only on request: read when
    this module is imported, where KRUNG_EXTRA_RUNGS's own must not be (a bad one is a
    usage error when a run starts, not a crash here)."""
    from krung.judge.ladder import discover

    return {name: module.SPEC.on_request for name, module in discover("").items()}


_BUILT_IN = _built_in_rungs()
BUILT_IN_RUNGS = tuple(_BUILT_IN)


def _ladder_help() -> str:
    default = [r for r, on_request in _BUILT_IN.items() if not on_request]
    others = [r for r, on_request in _BUILT_IN.items() if on_request]
    return ("Rungs to climb, comma-separated (static,compile), or added to the default ladder "
            "(+profile); they run in ladder order whatever the order given, and a rung whose "
            f"needed rung failed is skipped (default: {','.join(default)}; "
            f"also: {','.join(others)}).")


OPTIONS: dict[str, Option] = {o.name: o for o in [
    Option("rungs", str | None, None, _ladder_help(),
           tool_type=list[Literal[BUILT_IN_RUNGS]] | str | None),  # type: ignore[valid-type]
    Option("device", str | None, None,
           "auto (a CUDA GPU when torch sees one, else the CPU, where Triton runs under its "
           "interpreter), cpu or cuda", setting="device",
           tool_type=Literal[DEVICES] | None),  # type: ignore[valid-type]
    Option("seed", int | None, None,
           "The evaluation seed, to reproduce a run exactly (a run's `seed` field); by "
           "default fresh and random, so a version never sees the same inputs twice.",
           minimum=0),
    Option("timeout", float | None, None, "Seconds allowed for one call of the version.",
           setting="call_timeout_s"),
    Option("compile_timeout", float | None, None,
           "Seconds allowed for the import and the first call, which compiles.",
           setting="compile_timeout_s"),
    Option("precision", str | None, None,
           "fp32 (default), fp16 or bf16: casts the KernelBench problems' inputs and weights; "
           "their tolerance follows (1e-4 for fp32, 1e-2 for fp16 and bf16)."),
    Option("scale", float | None, None,
           "A factor in (0, 1] for the problem's sizes: 0.1 runs a KernelBench or GPU MODE "
           "problem at a tenth of its sizes, for the CPU loop; the problem is named "
           "NAME@scale0.1, with a history of its own.", setting="scale"),
    Option("forbid", str | None, None,
           "Python names the version must not use, comma-separated (torch.matmul,torch.mm), "
           "added to the problem's own policy (its `forbid`, or a krung.yml beside it: "
           "docs/problems.md); the static rung fails a version that uses one (ForbiddenName).",
           setting="forbid", tool_type=list[str] | str | None),
    Option("forbid_ops", str | None, None,
           "torch operators the version must not run, comma-separated (mm,addmm,bmm), added "
           "to the problem's own `forbid_ops`: traced in the checked calls, whatever names "
           "the source used (ForbiddenOp).", setting="forbid_ops",
           tool_type=list[str] | str | None),
    Option("require_own_kernel", bool, False,
           "Fail the correctness rung when a checked call launches no kernel of the "
           "version's own (only torch's operators: `delegated`), as a problem's krung.yml "
           "can ask (Delegated).", setting="require_own_kernel"),
    Option("graded", bool, False,
           "Grade the run so that it cannot be bent: the problem's files must match their "
           "pin (krung pin), no --seed, no setting that weakens a check, correctness in the "
           "ladder; refused otherwise, naming what (docs/trust.md). Without it the run "
           "records `graded: false`.", setting="graded"),
    Option("parent", str | None, None,
           "The run this version builds on (its run id or a unique prefix), so the history "
           "is a tree to walk back; by default the previous run of the same version file."),
    Option("vs_compiled", bool, False,
           "Also time torch.compile(reference) in the benchmark rung and give the speedup "
           "against it (`speedup_vs_compiled`; its compile time is not timed).",
           setting="compiled_baseline"),
    Option("profile", bool, False,
           "Also climb the profile rung (Nsight Compute on the case furthest from the "
           "roofline; tens of seconds, GPU only): --rungs +profile."),
    Option("max_runs", int | None, None,
           "Stop after this many evaluations (default: until Ctrl-C)."),
    Option("solutions", Path, REQUIRED,
           "The directory of solutions, each named like its problem (19_ReLU.py for "
           "19_ReLU.py, vectoradd_py.py for vectoradd_py/)."),
    Option("executor", str, "local", "Where evaluations run: the local, ray or ssh executor."),
    Option("workers", int, 1, "Evaluations at once (local without --gpus, ssh)."),
    Option("gpus", str | None, None,
           "GPUs for the local executor, e.g. 0,1 or all; one evaluation per GPU."),
    Option("per_gpu", int, 1,
           "Evaluations per GPU at most (their benchmarks take turns; each starts where "
           "its problem's device memory fits)."),
    Option("address", str | None, None, "Ray cluster address (ray executor)."),
    Option("remote", str | None, None, "user@host (ssh executor)."),
    Option("remote_python", str, "python3", "Python on the remote host."),
    Option("ssh_option", list[str] | None, None,
           "An option for ssh, e.g. -p2222 (repeatable)."),
    Option("json_output", bool, False, "Print one JSON object.", flag="--json"),
    Option("output_format", OutputFormat | None, None,
           "text (default), json (the same as --json), or agent: a short plain verdict for "
           "coding agents (first failure, its line, the hint, the figures, what to look at "
           "next).", flag="--format"),
    Option("store", Path | None, None, "SQLite store.", setting="store"),
]}

# What each front end takes, in the order its help lists them.
POLICY = ("forbid", "forbid_ops", "require_own_kernel")
RUN = ("rungs", "device", "seed", "timeout", "compile_timeout", "precision", "scale", *POLICY,
       "graded", "parent", "vs_compiled", "profile", "json_output", "output_format", "store")
WATCH = ("rungs", "device", *POLICY, "max_runs", "store")
EXECUTOR = ("executor", "workers", "gpus", "per_gpu", "address", "remote", "remote_python",
            "ssh_option")
BATCH = ("rungs", "device", *POLICY, *EXECUTOR, "json_output", "store")
SUITE = ("solutions", "precision", "rungs", "device", *POLICY, *EXECUTOR, "json_output",
         "store")
# What a `next:` command repeats of a `krung run` (rungs and store apart; the seed stays fresh)
REPEATED = ("device", "timeout", "compile_timeout", "precision", "scale", *POLICY, "vs_compiled",
            "output_format")
EVALUATE_TOOL = ("rungs", "seed", "device", "scale", *POLICY, "parent", "vs_compiled")
PROFILE_TOOL = ("seed", "device")


def cli_type(name: str) -> Any:
    """The option's typer annotation, for a parameter written by hand (`--json` of the
    commands that only list)."""
    option = OPTIONS[name]
    return Annotated[option.type, typer.Option(option.cli_flag, help=option.described,
                                               min=option.minimum)]


# For the commands that take no other run option (they list, show or serve).
StoreOption = cli_type("store")
JsonOption = cli_type("json_output")
FormatOption = cli_type("output_format")


def takes(*names: str) -> Callable[[F], F]:
    """Give a command the options `names` as its parameters: the function takes them as
    `**given` after its own (its arguments); typer reads the signature made here."""
    return lambda fn: _with_parameters(fn, {n: cli_type(n) for n in names})


def tool_fields(*names: str) -> Callable[[F], F]:
    """Give an MCP tool the options `names` as its input fields, taken as `**given`."""
    from pydantic import Field

    def field(name: str) -> Any:
        option = OPTIONS[name]
        kind = option.tool_type if option.tool_type is not None else option.type
        return Annotated[kind, Field(description=option.described, ge=option.minimum)]

    return lambda fn: _with_parameters(fn, {n: field(n) for n in names})


def _with_parameters(fn: F, annotations: Mapping[str, Any]) -> F:
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                               default=OPTIONS[name].default)
             for name, kind in annotations.items()]
    fn.__signature__ = inspect.Signature(own + added)  # type: ignore[attr-defined]
    return fn


def settings_of(given: Mapping[str, Any], base: Settings | None = None) -> Settings:
    """The settings (from the environment unless `base`) with the options in `given` that
    override one; a bad value is named by its option (--timeout=-1)."""
    chosen = {o.setting: _joined(given[o.name]) for o in OPTIONS.values()
              if o.setting is not None and _was_given(given.get(o.name))}
    sources = {o.setting: o.cli_flag for o in OPTIONS.values() if o.setting in chosen}
    return (base or Settings.from_env()).overridden(chosen, sources)


def _joined(value: Any) -> Any:
    """A list (an MCP field such as `forbid_ops: ["mm", "bmm"]`) as the command line's
    comma-separated text."""
    return ",".join(str(v) for v in value) if isinstance(value, list) else value


def _was_given(value: Any) -> bool:
    """None is an option left out, and False a flag left off (0 is a value, to be checked)."""
    return value is not None and value is not False


def as_flags(given: Mapping[str, Any], names: tuple[str, ...]) -> list[str]:
    """The options among `names` that `given` holds, as the command line takes them: what
    repeats a command with the same options (the `next:` line of an agent's verdict)."""
    flags: list[str] = []
    for name in names:
        value = given.get(name)
        if not _was_given(value):
            continue
        flags.append(OPTIONS[name].cli_flag)
        if value is not True:
            flags.append(str(getattr(value, "value", _joined(value))))
    return flags


def markdown() -> str:
    """docs/settings.md: every setting, then every option, from their declarations."""
    fronts = {"run": RUN, "watch": WATCH, "batch": BATCH, "suite": SUITE,
              "MCP evaluate": EVALUATE_TOOL, "MCP profile": PROFILE_TOOL}
    lines = ["# Settings and options", "",
             "<!-- Made by `python -m krung.host.options --markdown > docs/settings.md` from "
             "the declarations in krung/protocol/settings.py and krung/host/options.py; "
             "edit those. -->", "",
             "Every setting has one environment variable; the options below that override "
             "one do so for one command or call.", "", *settings_module.markdown(), "",
             "## Options", "",
             "What `krung run`, `watch`, `batch` and `suite` and the MCP server's `evaluate` "
             "and `profile` tools take; an option that overrides a setting defaults to it.",
             "", "| option | MCP field | default | taken by | meaning |",
             "| --- | --- | --- | --- | --- |"]
    tools = {*EVALUATE_TOOL, *PROFILE_TOOL}
    for option in OPTIONS.values():
        taken = ", ".join(front for front, names in fronts.items() if option.name in names)
        lines.append(f"| `{option.cli_flag}` | {f'`{option.name}`' if option.name in tools else ''}"
                     f" | {_default(option)} | {taken} | {_cell(option.help)} |")
    return "\n".join(lines) + "\n"


def _default(option: Option) -> str:
    if option.setting is not None:
        return f"`${settings_module.declared(option.setting).env}`"
    if option.default is REQUIRED:
        return "(required)"
    return "(none)" if option.default is None else settings_module.shown_default(
        option.default)


def _cell(text: str) -> str:
    return settings_module.markdown_cell(text)


def main(argv: Iterable[str]) -> int:
    if list(argv) != ["--markdown"]:
        sys.stderr.write("usage: python -m krung.host.options --markdown > docs/settings.md\n")
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
