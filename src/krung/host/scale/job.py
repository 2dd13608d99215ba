"""One evaluation packed to run somewhere else, and its run brought back.

`pack` makes a tar.gz of everything the evaluation needs: the problem directory (and the files
a GPU MODE task.yml brings from the folder above), the version (and the files beside it that
its source names, and every small module and CUDA source there), the job's options and (for
hosts without krung) krung's own sources. On the other side,
`python -m krung.host.scale.job DIR` (or `run_packed`) evaluates it with a store of its own and
prints one JSON object: the run, with its source, and the small files of its artifact folder
(or, when the evaluation could not start, its KrungError: `outcome_of` rebuilds it).
`receive` imports that run into the caller's store, with the caller's paths, and writes the
files into its artifact folder.
"""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import sys
import tarfile
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Any

import krung
from krung.host.scale import Job, Outcome
from krung.host.store import Store
from krung.judge.problem import GPUMODE, detect_format, find_problem
from krung.judge.problem.files import brought_by_task
from krung.judge.solution import read_solution
from krung.protocol.errors import KrungError, ProblemError, UsageError
from krung.protocol.results import Run
from krung.protocol.settings import Settings

MAX_SHIPPED_FILE = 64 << 20  # problem files larger than this stay home
MAX_HELPER_FILE = 1 << 20  # modules and CUDA sources beside the version up to this travel
HELPER_SUFFIXES = {".py", ".cu", ".cuh", ".h"}
MAX_RETURNED_FILE = 8 << 20  # artifact files larger than this are not sent back
MAX_RETURNED = 64 << 20  # nor any once the files sent back add up to this
_SKIP = {"__pycache__", ".git", ".krung", "solutions"}


def pack(job: Job, settings: Settings, with_krung: bool = True) -> bytes:
    problem_dir = find_problem(job.problem)
    version = read_solution(job.solution)
    spec = {"job": asdict(job), "problem": problem_dir.name, "version": version.name,
            "settings": {k: v for k, v in asdict(settings).items() if k != "store"},
            "calibrations": _calibrations(settings)}  # the roofline's ceilings, known here
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        _add_bytes(tar, "job.json", json.dumps(spec, default=str).encode())
        if problem_dir.is_file():  # a KernelBench problem is one file
            tar.add(problem_dir, arcname=f"problem/{problem_dir.name}")
        for path in sorted(problem_dir.rglob("*")) if problem_dir.is_dir() else []:
            relative = path.relative_to(problem_dir)
            if path.is_file() and not _SKIP & set(relative.parts) and \
                    path.stat().st_size <= MAX_SHIPPED_FILE:
                tar.add(path, arcname=f"problem/{problem_dir.name}/{relative}")
        for path, arcname in _brought_files(problem_dir):
            tar.add(path, arcname=arcname)
        tar.add(version.path, arcname=f"version/{version.name}")
        for sibling in sorted(version.path.parent.iterdir()):
            if sibling.is_file() and sibling != version.path and _travels_with(sibling,
                                                                             version.source):
                tar.add(sibling, arcname=f"version/{sibling.name}")
        if with_krung:
            package = Path(krung.__file__).resolve().parent
            for path in sorted(package.rglob("*.py")):
                tar.add(path, arcname=f"src/krung/{path.relative_to(package)}")
    return buffer.getvalue()


def _calibrations(settings: Settings) -> list[dict[str, Any]]:
    if not Path(settings.store).is_file():
        return []
    store = Store(settings.store)
    try:
        return store.calibrations()
    finally:
        store.close()


def _travels_with(sibling: Path, source: str) -> bool:
    """A file beside the version goes with it when the version names it, or when it is a
    small module or CUDA source it may import or include (`from helper import add`)."""
    size = sibling.stat().st_size
    if sibling.suffix in HELPER_SUFFIXES and size <= MAX_HELPER_FILE:
        return True
    return sibling.name in source and size <= MAX_SHIPPED_FILE


def _brought_files(problem_dir: Path) -> list[tuple[Path, str]]:
    """The files a GPU MODE task.yml brings from outside its directory (`../utils.py`), each
    with its place beside the shipped problem directory."""
    if detect_format(problem_dir) != GPUMODE:
        return []
    found = []
    for path in brought_by_task(problem_dir):
        relative = Path(os.path.relpath(path, problem_dir)).as_posix()
        arcname = posixpath.normpath(f"problem/{problem_dir.name}/{relative}")
        if not arcname.startswith("problem/"):
            raise UsageError(f"task.yml of {problem_dir} brings {relative}, more than one "
                             "folder above the problem: it cannot travel with the job",
                             hint="copy the file into the problem's folder or the one above, "
                                  "and name it from there in task.yml")
        found.append((path, arcname))
    return found


def unpack(data: bytes, workdir: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(workdir, filter="data")


def run_packed(workdir: Path) -> dict[str, Any]:
    """Evaluate an unpacked job in `workdir`; the run and its files as JSON-ready data."""
    from krung.host.evaluate import evaluate

    spec = json.loads((workdir / "job.json").read_text())
    job = spec["job"]
    settings = Settings(store=workdir / "store" / "krung.db",
                        **{k: v for k, v in spec["settings"].items()
                           if k in Settings.__dataclass_fields__})
    shipped = spec.get("calibrations") or []
    store = Store(settings.store)
    try:
        for entry in shipped:  # the caller's ceilings: no device is measured twice
            store.save_calibration(entry)
        run = evaluate(workdir / "problem" / spec["problem"],
                       workdir / "version" / spec["version"], rungs=job["rungs"],
                       device=job["device"], seed=job["seed"], precision=job.get("precision"),
                       settings=settings, store=store)
        measured = [c for c in store.calibrations() if c not in shipped]
        folder = store.artifacts_dir(run.run_id, create=False)
    finally:
        store.close()
    files, total = {}, 0
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        size = path.stat().st_size if path.is_file() else 0
        if path.is_file() and size <= MAX_RETURNED_FILE and total + size <= MAX_RETURNED:
            files[path.relative_to(folder).as_posix()] = base64.b64encode(
                path.read_bytes()).decode()
            total += size
    return {"run": run.to_json(with_source=True), "files": files, "calibrations": measured}


def receive(result: dict[str, Any], job: Job, store: Store, where: str) -> Run:
    """Import a run evaluated elsewhere; its paths become the caller's, `where` is noted."""
    run = Run.from_json(result["run"])
    run.problem_path = str(find_problem(job.problem))
    run.solution = str(read_solution(job.solution).path)
    run.env = {**run.env, "evaluated_on": where}
    if run.parent is None:  # the remote store was fresh: the parent is found here
        run.parent = store.previous_run(run.problem, run.solution, run.problem_path)
    store.import_run(run)
    folder = store.artifacts_dir(run.run_id)
    for name, data in result.get("files", {}).items():
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise UsageError(f"the run from {where} sent a file named {name!r}, outside its "
                             "artifact folder", hint="the remote krung is not this one: "
                                                     "check what runs there")
        path = folder.joinpath(*relative.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
    for entry in result.get("calibrations") or []:  # ceilings measured there, kept here
        store.save_calibration(entry)
    return run


def error_record(exc: KrungError) -> dict[str, Any]:
    """A KrungError raised where the job ran, as JSON: its type, message, hint, defects."""
    record: dict[str, Any] = {"type": type(exc).__name__, "message": exc.message,
                              "hint": exc.hint}
    if isinstance(exc, ProblemError):
        record.update(path=exc.path, defects=exc.defects)
    return {"error": record}


def rebuild_error(record: dict[str, Any]) -> KrungError:
    """The error `error_record` sent, as the caller would have raised it here."""
    if record.get("type") == "ProblemError":
        return ProblemError(record["path"], [(what, fix) for what, fix in record["defects"]])
    kind = UsageError if record.get("type") == "UsageError" else KrungError
    return kind(record["message"], hint=record.get("hint"))


def outcome_of(result: dict[str, Any], job: Job, settings: Settings, where: str) -> Outcome:
    """The caller's outcome of a job's result: the run, imported into settings.store, or the
    error that stopped the evaluation where it ran (a broken problem), as it reads here."""
    if "error" in result:
        record = result["error"]
        if record.get("type") == "ProblemError":  # the problem as the caller names it
            here, there = str(find_problem(job.problem)), record["path"]
            record = {**record, "path": here, "defects": [
                [text.replace(there, here) for text in defect] for defect in record["defects"]]}
        exc = rebuild_error(record)
        return Outcome(job, error=f"{type(exc).__name__}: {exc.message}", hint=exc.hint)
    store = Store(settings.store)
    try:
        return Outcome(job, run=receive(result, job, store, where=where))
    finally:
        store.close()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main() -> None:
    """`python -m krung.host.scale.job DIR`: DIR holds an unpacked job; prints its result."""
    try:
        result = run_packed(Path(sys.argv[1]))
    except KrungError as exc:  # a broken problem, say: the caller rebuilds the same error
        sys.stdout.write(json.dumps(error_record(exc)) + "\n")
        raise SystemExit(2) from None
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
