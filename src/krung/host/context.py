"""A workspace's context directory: reference material an agent searches while it writes kernels.

`add_context` fills `context/NAME` from a git URL (a shallow clone) or a local path;
`add_package_context` copies an installed package's source files. Only text files under a
size limit are kept, so a search over context/ is fast and finds source, not binaries.
After every add, `context/INDEX.md` is rewritten: each entry, where it came from, its size and
its top-level paths, so an agent knows where to look first. `search_context` prints
`file:line: text` hits, with ripgrep where it is installed and a plain scan otherwise.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from krung.protocol.errors import UsageError

CONTEXT_DIR = "context"
INDEX_FILE = "INDEX.md"
MANIFEST_FILE = ".sources.json"  # hidden, so searches skip it
MAX_FILE_BYTES = 1_000_000  # bigger files are data or generated code, not reading matter
MAX_LINE_CHARS = 240
GIT_TIMEOUT_S = 600.0
# An installed package's files worth reading; everything else there is compiled or data.
PACKAGE_SUFFIXES = frozenset({
    ".py", ".pyi", ".md", ".rst", ".txt", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c",
    ".mlir", ".td", ".ptx", ".yaml", ".yml", ".toml", ".json",
})
# Never worth copying from a path or a clone, whatever their first bytes look like.
BINARY_SUFFIXES = frozenset({
    ".so", ".dylib", ".dll", ".a", ".o", ".obj", ".lib", ".pyc", ".pyo", ".pyd", ".whl",
    ".egg", ".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".jar", ".bin",
    ".cubin", ".fatbin", ".exe", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".pdf",
    ".pt", ".pth", ".safetensors", ".npy", ".npz", ".onnx", ".h5", ".pkl", ".db", ".sqlite",
})
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache",
                       ".ruff_cache", ".tox", ".venv", "node_modules", ".krung"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_GIT_URL = re.compile(r"^(https?|git|ssh|file)://|^[\w.-]+@[\w.-]+:")


@dataclass
class ContextEntry:
    """One entry of context/: what is there and where it came from."""

    name: str
    source: str
    files: int
    bytes: int
    added_at: str | None = None
    skipped: int = 0  # files left out when it was added: binary, too big, not source
    top: tuple[str, ...] = ()  # top-level paths, folders first, with their file counts

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "files": self.files,
                "bytes": self.bytes, "added_at": self.added_at, "skipped": self.skipped,
                "top": list(self.top)}


@dataclass(frozen=True)
class Hit:
    path: str  # relative to the workspace, e.g. context/triton/language/core.py
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def context_dir(workspace: str | Path) -> Path:
    return Path(workspace) / CONTEXT_DIR


def add_context(workspace: str | Path, name: str, source: str, *,
                replace: bool = False) -> ContextEntry:
    """Fill context/NAME from a git URL (shallow clone, .git dropped) or a local path."""
    _check_name(name)
    local = Path(source).expanduser()
    if local.exists():
        root = context_dir(workspace).resolve()
        if local.resolve() == root or root in local.resolve().parents:
            raise UsageError(f"{source} is already inside {root}",
                             hint="add material from outside context/; it is searched as is")
        described = f"path {local.resolve()}"
        return _install(workspace, name, replace, described,
                        lambda dest: _copy_tree(local, dest, suffixes=None))
    if not _GIT_URL.search(source) and not source.endswith(".git"):
        raise UsageError(f"{source!r} is neither an existing path nor a git URL",
                         hint="give a directory or file, or a URL git can clone "
                              "(https://..., git@host:org/repo.git, file:///path/to/repo)")
    with tempfile.TemporaryDirectory(prefix="krung-clone-") as tmp:
        clone = Path(tmp) / "repo"
        commit = _shallow_clone(source, clone)
        return _install(workspace, name, replace, f"git {source} @ {commit[:12]}",
                        lambda dest: _copy_tree(clone, dest, suffixes=None))


def add_package_context(workspace: str | Path, package: str, *, name: str | None = None,
                        replace: bool = False) -> ContextEntry:
    """Copy the text source files of an installed package into context/NAME (NAME: package)."""
    name = name or package
    _check_name(name)
    roots = _package_roots(package)
    version = _package_version(package)
    described = f"package {package}" + (f" {version}" if version else "") + " (installed)"

    def fill(dest: Path) -> tuple[int, int, int]:
        totals = [0, 0, 0]
        for root in roots:
            target = dest / root.name if root.is_file() else dest
            for i, n in enumerate(_copy_tree(root, target, suffixes=PACKAGE_SUFFIXES)):
                totals[i] += n
        return totals[0], totals[1], totals[2]

    return _install(workspace, name, replace, described, fill)


def list_context(workspace: str | Path) -> list[ContextEntry]:
    """Every entry of context/, with its size as it is on disk now, by name."""
    root = context_dir(workspace)
    if not root.is_dir():
        return []
    manifest = _read_manifest(root)
    found = []
    for path in sorted(root.iterdir()):
        if not path.is_dir() or path.name.startswith("."):
            continue
        files, size = _size(path)
        record = manifest.get(path.name, {})
        found.append(ContextEntry(
            name=path.name, source=record.get("source", "unknown: not added by krung"),
            files=files, bytes=size, added_at=record.get("added_at"),
            skipped=record.get("skipped", 0), top=tuple(_top_level(path))))
    return found


def search_context(workspace: str | Path, query: str, *, max_hits: int = 50,
                   regex: bool = False, use_rg: bool | None = None) -> list[Hit]:
    """Lines of context/ that hold `query`, as `file:line: text`, in path order.

    Literal text unless `regex`; case-insensitive when the query has no capital letter
    (ripgrep's smart case). Uses `rg` when it is on PATH (or `use_rg` says so).
    """
    if not query:
        raise UsageError("the search query is empty", hint="krung context search 'tl.dot'")
    if max_hits < 1:
        raise UsageError(f"--max {max_hits} finds nothing", hint="use --max 1 or more")
    workspace = Path(workspace)
    root = context_dir(workspace)
    if not root.is_dir():
        raise UsageError(f"{workspace} has no {CONTEXT_DIR}/ directory",
                         hint="run this in a workspace made by `krung init`, or pass --dir, "
                              "or add something first: krung context add NAME SOURCE")
    rg = shutil.which("rg") if use_rg is not False else None
    if use_rg and rg is None:
        raise UsageError("rg (ripgrep) is not on PATH", hint="install ripgrep, or leave use_rg "
                                                              "unset to scan without it")
    if rg:
        return _search_rg(rg, workspace, query, max_hits, regex)
    return _search_scan(workspace, query, max_hits, regex)


def write_index(workspace: str | Path) -> Path:
    """Rewrite context/INDEX.md from what is in context/ now."""
    root = context_dir(workspace)
    root.mkdir(parents=True, exist_ok=True)
    entries = list_context(workspace)
    lines = [
        "# Context",
        "",
        "Reference material for writing this workspace's kernels: library sources, docs and",
        "examples. Read the files, or search them all at once:",
        "",
        "    krung context search QUERY          # prints file:line: text, --max N hits",
        "",
        "Add more (each add rewrites this file):",
        "",
        "    krung context add NAME https://github.com/ORG/REPO   # a git repository (shallow clone)",
        "    krung context add NAME path/to/docs                  # a local file or directory",
        "    krung context add --package triton                   # an installed package's sources",
        "",
        f"Only text files are kept: binaries and files over {_human(MAX_FILE_BYTES)} are left "
        "out.",
        "",
    ]
    if not entries:
        lines += ["No entries yet. Useful ones: `--package triton` (Triton), `--package cutlass`",
                  "(CuTeDSL), `--package tilelang` (TileLang), `--package torch` (C++ headers",
                  "and Python sources of torch).", ""]
    else:
        lines += ["| entry | source | files | size |", "| --- | --- | --- | --- |"]
        lines += [f"| [{e.name}]({e.name}/) | {e.source} | {e.files} | {_human(e.bytes)} |"
                  for e in entries]
        for entry in entries:
            lines += ["", f"## {entry.name}", "", f"- source: {entry.source}"]
            if entry.added_at:
                lines.append(f"- added: {entry.added_at}")
            skipped = f", {entry.skipped} left out" if entry.skipped else ""
            lines.append(f"- size: {entry.files} files, {_human(entry.bytes)}{skipped}")
            if entry.top:
                lines.append(f"- top level: {', '.join(f'`{p}`' for p in entry.top)}")
        lines.append("")
    index = root / INDEX_FILE
    index.write_text("\n".join(lines))
    return index


# --- adding ---------------------------------------------------------------------------------

def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name) or name == INDEX_FILE:
        raise UsageError(f"{name!r} is not a usable context entry name",
                         hint="use letters, digits, '.', '_' and '-', e.g. triton or "
                              "cutlass-examples")


def _install(workspace: str | Path, name: str, replace: bool, source: str,
             fill: Callable[[Path], tuple[int, int, int]]) -> ContextEntry:
    """Fill a temporary folder beside the entry, then move it in: no half-made entries."""
    root = context_dir(workspace)
    root.mkdir(parents=True, exist_ok=True)
    dest = root / name
    if dest.exists() and not replace:
        raise UsageError(f"{dest} already exists",
                         hint="choose another NAME, or pass --replace to fill it anew")
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        files, _, skipped = fill(staging)
        if files == 0:
            raise UsageError(f"nothing to add from {source}: no text files under "
                             f"{_human(MAX_FILE_BYTES)}",
                             hint="point at a directory of source or documentation")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    manifest = _read_manifest(root)
    manifest[name] = {"source": source, "skipped": skipped,
                      "added_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    (root / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    write_index(workspace)
    return next(e for e in list_context(workspace) if e.name == name)


def _shallow_clone(url: str, dest: Path) -> str:
    """`git clone --depth 1`; returns the commit cloned. Never prompts for credentials."""
    if shutil.which("git") is None:
        raise UsageError("git is not on PATH", hint="install git, or add a local copy by path")
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    try:
        done = subprocess.run(["git", "clone", "--depth", "1", "--quiet", "--", url, str(dest)],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise UsageError(f"git clone {url} took more than {GIT_TIMEOUT_S:g} s",
                         hint="clone it yourself and add the directory by path") from None
    if done.returncode != 0:
        raise UsageError(f"git clone {url} failed: {done.stderr.strip()[-500:]}",
                         hint="check the URL and your access to it; private repositories "
                              "need credentials git can use without prompting")
    head = subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], capture_output=True,
                          text=True, env=env)
    return head.stdout.strip() or "unknown"


def _copy_tree(source: Path, dest: Path, suffixes: frozenset[str] | None) -> tuple[int, int, int]:
    """Copy the readable text files under `source` (or `source` itself, if a file) to `dest`.

    Skips VCS and cache folders, links (they may point anywhere), files over the size limit,
    binaries (by suffix, or a NUL byte in the first 8 kB), and, with `suffixes`, any other
    suffix. Returns (files copied, bytes copied, files skipped).
    """
    copied = size = skipped = 0
    if source.is_file():
        pairs: Iterator[tuple[Path, Path]] = iter([(source, dest / source.name)])
    else:
        pairs = ((path, dest / path.relative_to(source)) for path in _walk(source, hidden=True))
    for path, target in pairs:
        if not _is_text_source(path, suffixes):
            skipped += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied += 1
        size += target.stat().st_size
    return copied, size, skipped


def _is_text_source(path: Path, suffixes: frozenset[str] | None) -> bool:
    suffix = path.suffix.lower()
    if suffixes is not None and suffix not in suffixes:
        return False
    if suffix in BINARY_SUFFIXES:
        return False
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return False
        with path.open("rb") as file:
            return b"\0" not in file.read(8192)
    except OSError:
        return False


def _package_roots(package: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise UsageError(f"no installed package {package!r} in this Python environment",
                         hint=f"install it (pip install {package}), check the import name "
                              "(CuTeDSL's is cutlass), or add its sources by path or git URL")
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations if Path(p).is_dir()]
    if spec.origin and spec.origin.endswith(".py"):
        return [Path(spec.origin)]
    raise UsageError(f"package {package!r} has no Python sources to copy (it is {spec.origin})",
                     hint="add its repository instead: krung context add NAME GIT_URL")


def _package_version(package: str) -> str | None:
    top = package.split(".")[0]
    names = importlib.metadata.packages_distributions().get(top, [])
    for dist in names or [top]:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return None


def _read_manifest(root: Path) -> dict:
    try:
        data = json.loads((root / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# --- reading --------------------------------------------------------------------------------

def _walk(root: Path, hidden: bool = False) -> Iterator[Path]:
    """Files under `root` in path order (entries of a folder sorted by name, as `rg --sort
    path` does), not following links and skipping VCS and cache folders."""
    try:
        children = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for child in children:
        if not hidden and child.name.startswith("."):
            continue
        if child.is_symlink():
            continue
        if child.is_dir():
            if child.name not in SKIP_DIRS:
                yield from _walk(Path(child.path), hidden)
        elif child.is_file():
            yield Path(child.path)


def _size(path: Path) -> tuple[int, int]:
    files = size = 0
    for file in _walk(path, hidden=True):
        files += 1
        size += file.stat().st_size
    return files, size


def _top_level(path: Path, limit: int = 12) -> list[str]:
    children = sorted((c for c in path.iterdir() if not c.name.startswith(".")),
                      key=lambda c: (not c.is_dir(), c.name))
    shown = []
    for child in children[:limit]:
        if child.is_dir():
            shown.append(f"{child.name}/ ({_size(child)[0]} files)")
        else:
            shown.append(child.name)
    if len(children) > limit:
        shown.append(f"... {len(children) - limit} more")
    return shown


def _search_rg(rg: str, workspace: Path, query: str, max_hits: int, regex: bool) -> list[Hit]:
    command = [rg, "--line-number", "--no-heading", "--null", "--color", "never",
               "--no-ignore", "--smart-case", "--sort", "path"]
    if not regex:
        command.append("--fixed-strings")
    command += ["--regexp", query, "--", CONTEXT_DIR]
    hits: list[Hit] = []
    with subprocess.Popen(command, cwd=workspace, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            path, _, rest = raw.partition(b"\0")
            number, _, text = rest.partition(b":")
            hits.append(Hit(path.decode(errors="replace"), int(number),
                            _clip(text.decode(errors="replace"))))
            if len(hits) >= max_hits:
                process.kill()  # enough: do not read the rest of the tree
                break
        _, errors = process.communicate()
    if process.returncode == 2 and not hits:
        raise UsageError(f"rg could not search for {query!r}: "
                         f"{errors.decode(errors='replace').strip()[-300:]}",
                         hint="check the pattern, or search literal text (no --regex)")
    return hits


def _search_scan(workspace: Path, query: str, max_hits: int, regex: bool) -> list[Hit]:
    flags = 0 if any(c.isupper() for c in query) else re.IGNORECASE
    try:
        pattern = re.compile(query if regex else re.escape(query), flags)
    except re.error as exc:
        raise UsageError(f"{query!r} is not a valid regular expression: {exc}",
                         hint="fix the pattern, or search literal text (no --regex)") from None
    hits: list[Hit] = []
    for path in _walk(context_dir(workspace)):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue  # binary, as rg judges it
        relative = path.relative_to(workspace).as_posix()
        lines = data.decode(errors="replace").split("\n")  # lines end at \n only, as in rg
        if lines and lines[-1] == "":
            lines.pop()
        for number, line in enumerate(lines, 1):
            if pattern.search(line.removesuffix("\r")):
                hits.append(Hit(relative, number, _clip(line)))
                if len(hits) >= max_hits:
                    return hits
    return hits


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + "..."


def _human(size: int) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return f"{size:.1f} GB"
