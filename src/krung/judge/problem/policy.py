"""A problem's delegation policy, in every format: what a version must compute itself.

Three parts, each stated by a native problem's `problem.py`, by a sidecar file beside a
problem of any format, and by the run's options (`--forbid`, `--forbid-ops`,
`--require-own-kernel`, the same fields in MCP, or their KRUNG_* settings); a run takes the
union of the three:

- `forbid`: Python names the version's source must not use (`torch.matmul`): the static rung
  (ForbiddenName);
- `forbid_ops`: torch operators its checked calls must not run (`mm`): traced at run time,
  whatever the source called them (ForbiddenOp);
- `require_own_kernel`: a checked call that launches no kernel of the version's own (only
  torch's operators) fails the correctness rung (Delegated).

The sidecar is YAML: `krung.yml` inside a problem directory (native, GPU MODE), and
`<stem>.krung.yml` beside a KernelBench file (`1_Square_matrix_multiplication_.krung.yml`),
since one KernelBench folder holds many problems.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krung.protocol.errors import ProblemError, UsageError
from krung.protocol.settings import Settings, name_list

SIDECAR = "krung.yml"
_EXAMPLE = "forbid: [torch.matmul, torch.mm]\nforbid_ops: [mm, addmm]\nrequire_own_kernel: true"


@dataclass(frozen=True)
class Policy:
    forbid: tuple[str, ...] = ()
    forbid_ops: tuple[str, ...] = ()
    require_own_kernel: bool = False

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        """The policy the run's options (or settings) state."""
        return cls(name_list(settings.forbid), name_list(settings.forbid_ops),
                   settings.require_own_kernel)


def sidecar_path(problem: Path) -> Path:
    """Where a problem's sidecar is: inside its directory, or beside its KernelBench file."""
    if problem.is_file():
        return problem.with_name(f"{problem.stem}.{SIDECAR}")
    return problem / SIDECAR


def read_sidecar(problem: Path) -> Policy:
    """The policy the problem's sidecar states (none when it has none); ProblemError naming
    every defect of one that is there."""
    file = sidecar_path(problem)
    if not file.is_file():
        return Policy()
    try:
        import yaml
    except ImportError:
        raise UsageError(f"reading {file} needs PyYAML, which is not installed",
                         hint="pip install pyyaml") from None
    try:
        data = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ProblemError(str(problem), [(f"{file.name} cannot be read: {exc}",
                                           f"fix {file} (YAML), e.g.\n{_EXAMPLE}")]) from exc
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ProblemError(str(problem), [(f"{file.name} holds a {type(data).__name__}, not a "
                                           "mapping", f"write its keys at the top level, e.g.\n"
                                                      f"{_EXAMPLE}")])
    defects = [(f"{file.name} has an unknown key `{key}`",
                "use forbid, forbid_ops and require_own_kernel") for key in data
               if key not in Policy.__dataclass_fields__]
    lists = {}
    for key in ("forbid", "forbid_ops"):
        value = data.get(key, [])
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            defects.append((f"{file.name}: `{key}` is not a list of names",
                            f"write `{key}: [name, ...]`"))
            value = []
        lists[key] = tuple(value)
    own = data.get("require_own_kernel", False)
    if not isinstance(own, bool):
        defects.append((f"{file.name}: `require_own_kernel` is {own!r}, not true or false",
                        "write `require_own_kernel: true`"))
    if defects:
        raise ProblemError(str(problem), defects)
    return Policy(lists["forbid"], lists["forbid_ops"], bool(own))


def apply_policy(problem: Any, policy: Policy) -> None:
    """Add `policy` to the problem's own (each name once, in the order first stated)."""
    problem.forbid = list(dict.fromkeys([*problem.forbid, *policy.forbid]))
    problem.forbid_ops = list(dict.fromkeys([*problem.forbid_ops, *policy.forbid_ops]))
    problem.require_own_kernel = problem.require_own_kernel or policy.require_own_kernel
