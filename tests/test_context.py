"""`krung context`: real git clones, real copies, real packages, searched with and without rg."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import krung
from krung.host.context import MAX_FILE_BYTES

RG = shutil.which("rg")


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                            GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com"))


@pytest.fixture
def repo(tmp_path):
    """A local git repository with two commits, text and a binary."""
    root = tmp_path / "kernels-repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# Kernels\nTiles of 128 x 64.\n")
    (root / "docs" / "swizzle.md").write_text("Swizzle the shared memory layout.\n")
    git("init", "--quiet", "--initial-branch=main", cwd=root)
    git("add", ".", cwd=root)
    git("commit", "--quiet", "-m", "one", cwd=root)
    (root / "gemm.cu").write_text("__global__ void gemm() {\n    // wgmma.mma_async\n}\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0wgmma")
    git("add", ".", cwd=root)
    git("commit", "--quiet", "-m", "two", cwd=root)
    return root


@pytest.fixture
def workspace(krung, tmp_path):
    assert krung("init", "ws").code == 0
    return tmp_path / "ws"


def test_git_url_is_cloned_shallow_without_git_or_binaries(krung, workspace, repo):
    result = krung("context", "add", "kernels", f"file://{repo}", cwd=workspace)
    assert result.code == 0, result.stderr
    entry = workspace / "context" / "kernels"
    assert sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*")) == [
        "README.md", "docs", "docs/swizzle.md", "gemm.cu"]
    assert "added context/kernels: 3 files" in result.stdout
    assert "left out 1" in result.stdout  # the png
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()
    index = (workspace / "context" / "INDEX.md").read_text()
    assert f"| [kernels](kernels/) | git file://{repo} @ {head[:12]} | 3 |" in index
    assert "`docs/ (1 files)`, `README.md`, `gemm.cu`" in index


def test_local_path_skips_git_binaries_and_big_files(krung, workspace, tmp_path):
    src = tmp_path / "notes"
    (src / ".git").mkdir(parents=True)
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0\0")
    (src / "tiling.md").write_text("Use 128-byte rows.\n")
    (src / "blob.dat").write_bytes(b"abc\0def")
    (src / "huge.txt").write_text("x" * (MAX_FILE_BYTES + 1))
    (src / "lib.so").write_text("not really a library")
    result = krung("context", "add", "notes", src, cwd=workspace)
    assert result.code == 0, result.stderr
    kept = sorted(p.name for p in (workspace / "context" / "notes").rglob("*"))
    assert kept == ["tiling.md"]
    single = krung("context", "add", "one", src / "tiling.md", cwd=workspace)
    assert single.code == 0
    assert (workspace / "context" / "one" / "tiling.md").is_file()


def test_package_sources_are_copied_without_compiled_files(krung, workspace):
    import typer

    result = krung("context", "add", "--package", "typer", cwd=workspace)
    assert result.code == 0, result.stderr
    entry = workspace / "context" / "typer"
    assert (entry / "main.py").read_text() == (Path(typer.__file__).parent / "main.py").read_text()
    suffixes = {p.suffix for p in entry.rglob("*") if p.is_file()}
    assert suffixes <= {".py", ".pyi", ".md", ".txt", ".json", ".toml", ".yaml"}
    assert not list(entry.rglob("__pycache__"))
    assert f"package typer {typer.__version__} (installed)" in result.stdout

    # Triton, the package an agent writing Triton needs: its language sources are there.
    both = krung("context", "add", "tri", "some/path", "--package", "triton", cwd=workspace)
    assert both.code == 2 and "not both" in both.stderr
    result = krung("context", "add", "tri", "--package", "triton", cwd=workspace)
    assert result.code == 0, result.stderr
    assert (workspace / "context" / "tri" / "language" / "core.py").is_file()
    assert not [p for p in (workspace / "context" / "tri").rglob("*")
                if p.suffix in (".so", ".pyc", ".a")]


def test_list_shows_files_and_bytes(krung, workspace, repo):
    assert krung("context", "add", "kernels", f"file://{repo}", cwd=workspace).code == 0
    assert krung("context", "add", "--package", "typer", cwd=workspace).code == 0
    listed = krung("context", "list", "--json", cwd=workspace)
    entries = {e["name"]: e for e in json.loads(listed.stdout)}
    assert sorted(entries) == ["kernels", "typer"]
    sizes = [len(p.read_bytes()) for p in (workspace / "context/kernels").rglob("*")
             if p.is_file()]
    assert entries["kernels"]["files"] == 3 and entries["kernels"]["bytes"] == sum(sizes)
    text = krung("context", "list", cwd=workspace).stdout
    assert "kernels" in text and "typer" in text and "2 entries" in text


def test_existing_entry_is_kept_unless_replaced(krung, workspace, repo):
    assert krung("context", "add", "kernels", f"file://{repo}", cwd=workspace).code == 0
    again = krung("context", "add", "kernels", repo / "docs", cwd=workspace)
    assert again.code == 2
    assert "already exists" in again.stderr and "--replace" in again.stderr
    assert (workspace / "context/kernels/gemm.cu").is_file()
    replaced = krung("context", "add", "kernels", repo / "docs", "--replace", cwd=workspace)
    assert replaced.code == 0
    assert sorted(p.name for p in (workspace / "context/kernels").iterdir()) == ["swizzle.md"]


def test_bad_sources_are_explained(krung, workspace, tmp_path):
    nowhere = krung("context", "add", "x", "no/such/dir", cwd=workspace)
    assert nowhere.code == 2 and "neither an existing path nor a git URL" in nowhere.stderr
    clone = krung("context", "add", "x", f"file://{tmp_path}/not-a-repo", cwd=workspace)
    assert clone.code == 2 and "git clone" in clone.stderr and "hint:" in clone.stderr
    package = krung("context", "add", "--package", "no_such_package_anywhere", cwd=workspace)
    assert package.code == 2 and "no installed package" in package.stderr
    name = krung("context", "add", "../up", tmp_path, cwd=workspace)
    assert name.code == 2 and "not a usable context entry name" in name.stderr
    inside = krung("context", "add", "again", "context", cwd=workspace)
    assert inside.code == 2 and "already inside" in inside.stderr
    assert sorted(p.name for p in (workspace / "context").iterdir()) == ["INDEX.md"]


def _search(krung, workspace, *args, rg: bool):
    # Hide rg by running with a PATH that holds nothing; the command runs sys.executable.
    env = None if rg else {"PATH": str(workspace / "no-tools-here")}
    return krung("context", "search", *args, cwd=workspace, env=env)


@pytest.mark.parametrize("rg", [
    pytest.param(True, marks=pytest.mark.skipif(RG is None, reason="rg is not on PATH")),
    False,
])
def test_search_prints_file_line_text(krung, workspace, repo, rg):
    assert krung("context", "add", "kernels", f"file://{repo}", cwd=workspace).code == 0
    found = _search(krung, workspace, "wgmma", rg=rg)
    assert found.code == 0, found.stderr
    assert found.stdout.splitlines() == ["context/kernels/gemm.cu:2: // wgmma.mma_async"]
    smart = _search(krung, workspace, "swizzle", rg=rg)  # lower case: case-insensitive
    assert smart.stdout.splitlines() == ["context/kernels/docs/swizzle.md:1: Swizzle the shared "
                                         "memory layout."]
    exact = _search(krung, workspace, "swizzle the", rg=rg).stdout
    assert _search(krung, workspace, "Swizzle the", rg=rg).stdout == exact
    assert _search(krung, workspace, "SWIZZLE", rg=rg).code == 1  # a capital: exact case
    none = _search(krung, workspace, "no such words", rg=rg)
    assert none.code == 1 and "no match for 'no such words'" in none.stderr
    regex = _search(krung, workspace, r"\d+ x \d+", "--regex", rg=rg)
    assert regex.stdout.splitlines() == ["context/kernels/README.md:2: Tiles of 128 x 64."]
    literal = _search(krung, workspace, "128 x 6", rg=rg)
    assert literal.code == 0


@pytest.mark.skipif(RG is None, reason="rg is not on PATH")
def test_rg_and_the_plain_scan_find_the_same_hits(krung, workspace):
    assert krung("context", "add", "--package", "typer", cwd=workspace).code == 0
    for query, limit in (("typer", "40"), ("def ", "1000"), ("Optional[", "100000")):
        with_rg = _search(krung, workspace, query, "--max", limit, rg=True)
        without = _search(krung, workspace, query, "--max", limit, rg=False)
        assert with_rg.code == 0
        assert with_rg.stdout == without.stdout
        assert 0 < len(with_rg.stdout.splitlines()) <= int(limit)


def test_search_api_stops_at_max_and_explains_a_missing_context(tmp_path):
    (tmp_path / "context" / "a").mkdir(parents=True)
    (tmp_path / "context" / "a" / "f.txt").write_text("hit\n" * 10)
    hits = krung.search_context(tmp_path, "hit", max_hits=3, use_rg=False)
    assert [str(h) for h in hits] == [f"context/a/f.txt:{n}: hit" for n in (1, 2, 3)]
    if RG:
        assert krung.search_context(tmp_path, "hit", max_hits=3, use_rg=True) == hits
    with pytest.raises(krung.UsageError) as missing:
        krung.search_context(tmp_path / "elsewhere", "hit")
    assert "has no context/ directory" in missing.value.message
    assert "krung init" in missing.value.hint


def test_context_commands_need_no_workspace_beyond_the_folder(tmp_path):
    done = subprocess.run([sys.executable, "-m", "krung", "context", "add", "--package", "typer",
                           "--dir", str(tmp_path / "plain")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "plain" / "context" / "INDEX.md").is_file()
