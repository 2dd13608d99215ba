"""Build caches for CUDA C++ versions, under the store: `<store dir>/build_cache/`.

A key is a hash of everything that makes the output (source text, flags, target, tool and
torch versions), so an unchanged source is built once however many versions or runs use it,
and two versions that share an extension name never rebuild over each other.
- `nvcc/<key>/`: PTX, CUBIN and ptxas's report from krung's own nvcc compile (no GPU needed);
- `torch_extensions/<name>_<key>/`: torch's own build folder for `load_inline`/`load` on a
  GPU (passed as `build_directory`), where ninja finds the objects of the last build;
- `versions/<sha256[:16]>/torch_extensions/...`: the same, for a version whose worker raises
  the walls: written by the version's own process, so its entries serve the same version
  alone (another version cannot plant a library that this one loads);
- `footprint/<key>.json`: a KernelBench problem's declared bytes, by its text, for a CPU run
  at its declared sizes (krung.judge.problem.cpu_fit).
The judge alone writes `nvcc/`, `inspect/` and `footprint/`; a walled worker only reads them.
Stdlib only: used by the worker, the judge and the build process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FOLDER = "build_cache"


def root_for(run_dir: Path) -> Path:
    """The cache beside the store, from a run's folder (`<store dir>/runs/<id>`)."""
    return run_dir.parent.parent / FOLDER


def key(facts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def entry(cache_dir: str | Path | None, facts: dict[str, Any]) -> Path | None:
    if not cache_dir:
        return None
    return Path(cache_dir) / "nvcc" / key(facts)


def fetch(entry: Path, folder: Path, names: Iterable[str]) -> bool:
    """Copy a cached build's files into `folder`; False when the cache lacks one."""
    names = list(names)
    if not all((entry / n).is_file() for n in names):
        return False
    for name in names:
        shutil.copyfile(entry / name, folder / name)
    return True


def keep(entry: Path, folder: Path, names: Iterable[str]) -> None:
    """Store a build's files; written to a temporary folder and renamed into place, so a
    concurrent run never reads half an entry."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=entry.parent))
    try:
        for name in names:
            shutil.copyfile(folder / name, staging / name)
        os.replace(staging, entry)
    except OSError:  # another run stored the same entry first: theirs is as good
        shutil.rmtree(staging, ignore_errors=True)


def version_root(root: str | Path, sha256: str) -> Path:
    """The build cache of the version whose bytes have `sha256`, made now (the walls allow
    only folders that exist)."""
    folder = Path(root) / "versions" / sha256[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def torch_build_dir(root: str | Path, name: str, facts: dict[str, Any]) -> Path:
    """torch's build folder for one extension: its name and the key of its sources and flags."""
    folder = Path(root) / "torch_extensions" / f"{name}_{key(facts)}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def built(folder: Path, name: str) -> bool:
    """Whether torch already built extension `name` there (its shared library exists)."""
    with contextlib.suppress(OSError):
        return any(p.name.startswith(name) and p.suffix == ".so" for p in folder.iterdir())
    return False
