"""The files a problem is made of, hashed: what every run records (`problem_sha256`) and what
a graded run checks against the problem's pin (krung.host.grading). Read from the file system
alone, never imported, so the host can do it.

Every file counts, not only the one krung imports: problem.py may import a module beside it,
read a data file, and a policy sidecar (krung.yml) changes what is forbidden. Left out: a
folder's `solutions/` (a built-in's example versions), Python's caches and hidden files (a
store kept inside the folder).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from krung.judge.problem.policy import sidecar_path

LEFT_OUT = {"solutions", "__pycache__"}


def problem_files(path: Path) -> dict[str, str]:
    """{name: sha256} of every file of the problem at `path` (as find_problem gives it), the
    names relative to its folder: a KernelBench file and its sidecar; every file in a
    problem's folder (problem.py, or GPU MODE's reference.py and task.yml, the modules beside
    them, krung.yml), and the files GPU MODE's task.yml brings from elsewhere (../utils.py)."""
    if path.is_file():
        folder, found = path.parent, [path, sidecar_path(path)]
    else:
        folder = path
        found = [p for p in path.rglob("*") if not _left_out(p.relative_to(path))]
        found += brought_by_task(path)
    return {os.path.relpath(p, folder): _sha256(p) for p in sorted(set(found)) if p.is_file()}


def combined_sha256(files: dict[str, str]) -> str:
    """One hash of all the files, names included."""
    lines = "".join(f"{name}\0{sha}\n" for name, sha in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def changes(pinned: dict[str, str], now: dict[str, str]) -> list[str]:
    """Each file that differs, as `name (changed|added|removed)`."""
    return [f"{name} ({'added' if name not in pinned else 'removed' if name not in now else 'changed'})"
            for name in sorted({*pinned, *now}) if pinned.get(name) != now.get(name)]


def _left_out(relative: Path) -> bool:
    return any(part in LEFT_OUT or part.startswith(".") for part in relative.parts)


def brought_by_task(folder: Path) -> list[Path]:
    """The files GPU MODE's task.yml lists from outside the folder (`../utils.py`), resolved;
    none where there is no task.yml or it cannot be read (the judge reports that defect)."""
    task = folder / "task.yml"
    if not task.is_file():
        return []
    try:
        import yaml

        entries = (yaml.safe_load(task.read_text()) or {}).get("files") or []
    except Exception:  # a broken task.yml: its own hash still counts
        return []
    sources = [e.get("source") for e in entries if isinstance(e, dict)]
    found = [(folder / s).resolve() for s in sources
             if isinstance(s, str) and not s.startswith("@") and (folder / s).is_file()]
    return [p for p in found if not p.is_relative_to(folder.resolve())]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
