"""`krung new NAME`: a problem directory and a first Triton version that passes the ladder.

The template (krung/templates/problem.py, also what `krung init` starts from) is a real
problem (SiLU, fp32 and bf16) so the loop works before anything is edited; replace the
reference, the cases and the work counts with your own operation. The version is the Triton
first version a workspace gets (krung/templates/versions/triton.py).
"""

from __future__ import annotations

from pathlib import Path

from krung.host import templates
from krung.protocol.errors import UsageError


def scaffold(name: str, parent: Path) -> Path:
    if not name.isidentifier():
        raise UsageError(f"{name!r} is not a usable problem name",
                         hint="use letters, digits and underscores, e.g. fused_silu")
    target = parent / name
    if target.exists():
        raise UsageError(f"{target} already exists", hint="choose another name or --dir")
    (target / "solutions").mkdir(parents=True)
    (target / "problem.py").write_text(template_problem(name))
    version = templates.fill(templates.version("triton"), title=name, signature="x", state="",
                             entry=templates.WORKING_ENTRY,
                             checks=f"Run it: krung run {name} {name}/solutions/triton_v1.py")
    (target / "solutions" / "triton_v1.py").write_text(version)
    return target


def template_problem(name: str) -> str:
    """The template problem's problem.py, named `name`."""
    return templates.fill((templates.TEMPLATES / "problem.py").read_text(), name=name)
