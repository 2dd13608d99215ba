"""The files a run leaves in its folder (`<store dir>/runs/<run id>/`), by kind.

Today a run holds `worker.log` and `judge.log`; compiler outputs (PTX, SASS, Triton IR) and
profiles go there too, named after their kernel (e.g. `add_kernel.ptx`). A file's kind comes
from its extension or name, so readers can ask for "the PTX of kernel X" without knowing the
exact file name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from krung.host.store import Store, opened
from krung.protocol.errors import UsageError

MAX_READ_BYTES = 64 * 1024

# Extension -> kind. Longest match first, so `.ncu-rep` wins over a shorter suffix.
_KIND_BY_SUFFIX = {
    ".ptx": "ptx", ".sass": "sass", ".cubin": "cubin", ".ttir": "ttir", ".ttgir": "ttgir",
    ".llir": "llir", ".ll": "llir", ".mlir": "mlir", ".amdgcn": "amdgcn", ".hsaco": "hsaco",
    ".log": "log", ".ncu-rep": "profile", ".nsys-rep": "profile", ".qdrep": "profile",
    ".cu": "source", ".cuh": "source", ".cpp": "source", ".py": "source",
    ".json": "json", ".csv": "csv", ".txt": "text", ".ptxas": "ptxas",
    ".figures.json": "figures", ".trace.json": "trace",
}
KINDS = tuple(sorted(set(_KIND_BY_SUFFIX.values()) | {"other"}))
_BINARY_KINDS = {"cubin", "hsaco"}


@dataclass(frozen=True)
class RunFile:
    name: str  # path relative to the run's folder
    kind: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_files(run_id: str, *, kind: str | None = None, kernel: str | None = None,
              store: str | Path | Store | None = None) -> list[RunFile]:
    """The files of a run (by id or unique prefix), optionally of one kind or kernel."""
    with opened(store) as db:
        return list_files(db.artifacts_dir(db.get(run_id).run_id, create=False), kind, kernel)


def read_run_file(run_id: str, *, name: str | None = None, kind: str | None = None,
                  kernel: str | None = None, offset: int = 0, max_bytes: int = MAX_READ_BYTES,
                  store: str | Path | Store | None = None) -> dict[str, Any]:
    """One file of a run as text (see `read_file`), with the run's id."""
    with opened(store) as db:
        run_id = db.get(run_id).run_id
        folder = db.artifacts_dir(run_id, create=False)
    return {"run_id": run_id, **read_file(folder, name=name, kind=kind, kernel=kernel,
                                          offset=offset, max_bytes=max_bytes)}


def kind_of(name: str) -> str:
    lower = name.lower()
    if "profile" in lower.rsplit("/", 1)[-1] and not lower.endswith(".log"):
        return "profile"
    for suffix in sorted(_KIND_BY_SUFFIX, key=len, reverse=True):
        if lower.endswith(suffix):
            return _KIND_BY_SUFFIX[suffix]
    return "other"


def list_files(folder: Path, kind: str | None = None, kernel: str | None = None) -> list[RunFile]:
    """The run's files, sorted by name, optionally only one kind or those whose name holds
    `kernel` (case-insensitive)."""
    _check_kind(kind)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        name = path.relative_to(folder).as_posix()
        file = RunFile(name, kind_of(name), path.stat().st_size)
        if kind and file.kind != kind:
            continue
        if kernel and kernel.lower() not in name.lower():
            continue
        found.append(file)
    return found


def read_file(folder: Path, *, name: str | None = None, kind: str | None = None,
              kernel: str | None = None, offset: int = 0,
              max_bytes: int = MAX_READ_BYTES) -> dict[str, Any]:
    """One file of the run as text: by `name`, or the only file of `kind` (and `kernel`).

    `offset` is where to start, in bytes; a negative offset counts from the end (-4096: the
    last 4 KiB, what a log's reader wants). At most `max_bytes` come back; `next_offset`
    says where the rest starts.
    """
    if max_bytes <= 0:
        raise UsageError(f"max_bytes={max_bytes} must be positive",
                         hint=f"ask for up to {MAX_READ_BYTES} bytes at a time")
    file = _choose(folder, name, kind, kernel)
    path = folder / file.name
    start = max(file.size + offset, 0) if offset < 0 else min(offset, file.size)
    answer: dict[str, Any] = {**file.to_json(), "offset": start}
    if file.kind in _BINARY_KINDS:
        return {**answer, "binary": True, "text": None, "next_offset": None,
                "note": f"{file.kind} is a binary format; ask for its text form (e.g. sass) "
                        "instead"}
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(max_bytes)
    end = start + len(data)
    return {**answer, "binary": False, "text": data.decode(errors="replace"),
            "truncated": end < file.size or start > 0,
            "next_offset": end if end < file.size else None}


def _choose(folder: Path, name: str | None, kind: str | None, kernel: str | None) -> RunFile:
    every = list_files(folder)
    if name is not None:
        chosen = next((f for f in every if f.name == name), None)
        if chosen is None:
            raise UsageError(f"the run has no file {name!r}",
                             hint=_available(every))
        return chosen
    if kind is None:
        raise UsageError("say which file: give its name, or its kind",
                         hint=_available(every))
    matches = list_files(folder, kind, kernel)
    if len(matches) == 1:
        return matches[0]
    wanted = f"{kind} file" + (f" for kernel {kernel!r}" if kernel else "")
    if not matches:
        raise UsageError(f"the run has no {wanted}", hint=_available(every))
    names = ", ".join(f.name for f in matches)
    raise UsageError(f"the run has {len(matches)} {wanted}s: {names}",
                     hint="give the file's name, or a kernel name that picks one")


def _available(files: list[RunFile]) -> str:
    if not files:
        return "the run's folder is empty (the run may be from another store, or still running)"
    return "its files: " + ", ".join(f"{f.name} ({f.kind})" for f in files)


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise UsageError(f"unknown file kind {kind!r}", hint=f"choose from: {', '.join(KINDS)}")
