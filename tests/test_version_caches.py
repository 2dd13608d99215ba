"""Each version's compile caches are its own (krung.judge.candidate.version_caches,
docs/trust.md "Poisoning a compile cache another run reads"): a version cannot plant an
entry that another version's run loads, and the same version evaluated again finds its own.

Real `krung` commands and real workers on the CPU. Where the kernel has no Landlock the
writes that only the walls refuse are not asserted (saying so); the folders being apart
holds everywhere.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest

from krung.judge.candidate import Candidate, worker_env
from krung.worker.guard import landlock_abi

ABI = landlock_abi()

# At its import, tries to plant a file in its own Triton cache, in that folder's parent (its
# own XDG_CACHE_HOME; or the versions' folder beneath a cache the caller chose) and
# grandparent (the versions' folder; or the cache the caller chose), in the workers' old shared
# Triton cache and in another version's Triton cache (OTHER); writes what it saw and what it
# could write into its own cache.
PROBE = """
    import json, os, time
    from pathlib import Path

    TAG, SHARED, OTHER = {tag!r}, {shared!r}, {other!r}
    own = Path(os.environ["TRITON_CACHE_DIR"])
    seen = sorted(p.name for p in own.iterdir()) if own.is_dir() else []
    targets = {{"own": own, "parent": own.parent, "versions": own.parent.parent,
               "shared": Path(SHARED)}}
    if OTHER:
        targets["other"] = Path(OTHER)
    tried = {{}}
    for name, folder in targets.items():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "planted").write_text(TAG)
            tried[name] = "written"
        except PermissionError:
            tried[name] = "refused"
    import triton
    report = {{"tag": TAG, "dir": str(own), "seen": seen, "tried": tried,
              "knob": triton.knobs.cache.dir, "home": os.environ["HOME"],
              "cuda_cache": os.environ["CUDA_CACHE_PATH"]}}
    (own / f"report-{{time.time_ns()}}.json").write_text(json.dumps(report))

    def kernel(x):
        return x * 2 + 1
"""


def probe(version, name: str, shared: Path, other: Path | None = None) -> tuple[Path, str]:
    """The probing version `name`, and the first 16 hex digits of its sha256."""
    source = textwrap.dedent(PROBE).format(tag=name, shared=str(shared),
                                           other=str(other) if other else "")
    path = version(name, source)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def reports(folder: Path) -> list[dict]:
    """What the probes that ran with `folder` as their Triton cache said, oldest first."""
    found = sorted(folder.glob("report-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    return [json.loads(p.read_text()) for p in found]


def assert_walled(tried: dict[str, str], own: tuple[str, ...] = ("own", "parent")) -> None:
    """Only the folders of the version's own (`own`) were written to, where there are walls."""
    if not ABI:
        return  # no walls: the version has its user's rights (test_sandbox.py says so too)
    assert {k: v for k, v in tried.items() if k in own} == dict.fromkeys(own, "written")
    assert {v for k, v in tried.items() if k not in own} == {"refused"}, tried


def test_the_version_caches_are_named_by_the_versions_content(tmp_path):
    scratch, cache = tmp_path / "scratch", tmp_path / "cache"
    first, second = "ab" * 32, "cd" * 32
    env = worker_env(scratch, cache, {"PATH": "/usr/bin"}, sha256=first)
    own = cache / "versions" / first[:16]
    assert env["TRITON_CACHE_DIR"] == str(own / "triton")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(own / "torchinductor")
    assert env["TILELANG_CACHE_DIR"] == str(own / "tilelang")
    assert env["XDG_CACHE_HOME"] == str(own)
    assert worker_env(scratch, cache, {}, sha256=first)["TRITON_CACHE_DIR"] == str(
        own / "triton")  # the same version: the same, warm, folders
    assert worker_env(scratch, cache, {}, sha256=second)["TRITON_CACHE_DIR"] == str(
        cache / "versions" / second[:16] / "triton")
    # Caches the caller chose: the version's folder beneath them; CUDA's is the worker's own.
    chosen = worker_env(scratch, cache, {"TRITON_CACHE_DIR": "/fast/triton",
                                         "TORCH_EXTENSIONS_DIR": "/fast/ext",
                                         "CUDA_CACHE_PATH": "/fast/nv"}, sha256=first)
    assert chosen["TRITON_CACHE_DIR"] == f"/fast/triton/krung-versions/{first[:16]}"
    assert chosen["TORCH_EXTENSIONS_DIR"] == f"/fast/ext/krung-versions/{first[:16]}"
    assert chosen["CUDA_CACHE_PATH"] == str(scratch / "nv")
    # Before its version is known (a pooled worker): every cache in its scratch.
    unknown = worker_env(scratch, cache, {"TRITON_CACHE_DIR": "/fast/triton",
                                          "TORCH_EXTENSIONS_DIR": "/fast/ext"})
    assert unknown["TRITON_CACHE_DIR"] == str(scratch / "cache" / "triton")
    assert unknown["XDG_CACHE_HOME"] == str(scratch / "cache")
    assert "TORCH_EXTENSIONS_DIR" not in unknown


def test_a_version_cannot_plant_a_cache_entry_another_version_loads(krung, scale_problem,
                                                                     version, tmp_path):
    """A version plants a file wherever it can think of: the walls refuse all but its own
    folder; a different version evaluated after it does not see the file; the first version
    evaluated again finds its own folder as it left it (warm)."""
    workers = tmp_path / "cache" / "krung" / "worker"
    shared = workers / "triton"  # the workers' shared Triton cache, before krung 21
    shared.mkdir(parents=True)
    victim, victim_sha = probe(version, "victim", shared)
    victim_cache = workers / "versions" / victim_sha / "triton"
    planter, planter_sha = probe(version, "planter", shared, other=victim_cache)
    planter_cache = workers / "versions" / planter_sha / "triton"
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    for path in (planter, victim, planter):
        result = krung("run", scale_problem, path, "--json", "--rungs", "static,compile",
                       env=env)
        assert result.code == 0, result.stdout[-3000:] + result.stderr[-3000:]

    first, again = reports(planter_cache)
    assert first["dir"] == again["dir"] == first["knob"] == str(planter_cache)
    assert "planted" in again["seen"] and any(s.startswith("report-") for s in again["seen"])
    assert_walled(first["tried"])
    assert_walled(again["tried"])
    [seen_by_victim] = reports(victim_cache)
    assert seen_by_victim["knob"] == str(victim_cache)
    if ABI:
        assert seen_by_victim["seen"] == [], seen_by_victim  # nothing planted in its cache
        assert not (shared / "planted").exists()


@pytest.mark.parametrize("chosen", [False, True], ids=["default", "caller_chose"])
def test_a_pooled_worker_takes_its_versions_caches_at_load(tmp_path, monkeypatch, version,
                                                          chosen):
    """A worker started before its version is known, with Triton imported in advance (the warm
    service's): the `load` request gives it the version's caches, which Triton reads at use
    (triton.knobs), and the walls name those alone; a TRITON_CACHE_DIR the caller chose holds
    the version's folder beneath it, itself out of the version's reach."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    workers = tmp_path / "cache" / "krung" / "worker"
    solution, sha = probe(version, "pooled", workers / "triton")
    env = {"TRITON_CACHE_DIR": str(tmp_path / "chosen")} if chosen else {}
    expected = (tmp_path / "chosen" / "krung-versions" / sha if chosen
                else workers / "versions" / sha / "triton")
    candidate = Candidate("cpu", tmp_path, solution, env=env)
    candidate.start(preload=("triton",))
    try:
        loaded = candidate.request({"op": "load", "path": str(solution)}, 120, "load")
        assert loaded["ok"], loaded
        writable = candidate.sandbox_request(None)["writable"]
    finally:
        candidate.close()
    [report] = reports(expected)
    assert report["dir"] == report["knob"] == str(expected)
    assert report["cuda_cache"].startswith(report["home"])  # the worker's own, in its scratch
    assert str(expected) in writable
    shared = (workers, workers / "versions", tmp_path / "chosen",
              tmp_path / "chosen" / "krung-versions")
    assert not set(writable) & {str(s) for s in shared}, writable
    assert_walled(report["tried"], own=("own",) if chosen else ("own", "parent"))


# At its import, plants a library where torch would build an extension: in its own folder of
# the store's build cache, in the shared one (where builds of workers without walls go), and
# among the judge's nvcc outputs.
BUILD_PLANTER = """
    import hashlib
    from pathlib import Path

    ROOT = Path({root!r})
    own = ROOT / "versions" / hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    for folder in (own / "torch_extensions" / "ext_{tag}", ROOT / "torch_extensions" /
                   "ext_{tag}", ROOT / "nvcc" / "{tag}"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "ext.so").write_text("planted")
        except OSError:
            pass

    def kernel(x):
        return x * 2 + 1
"""


def test_a_walled_version_builds_cuda_cpp_in_a_build_cache_of_its_own(tmp_path, version):
    """torch's CUDA C++ builds of a version whose worker raises the walls go to
    `build_cache/versions/<sha>/`: the version writes there, and not where another version's
    build (or the judge's nvcc) would find what it planted."""
    import torch

    root = tmp_path / "store" / "build_cache"
    root.mkdir(parents=True)
    tag = f"{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]}"
    solution = version("planter", textwrap.dedent(BUILD_PLANTER).format(root=str(root), tag=tag))
    sha = hashlib.sha256(solution.read_bytes()).hexdigest()
    (tmp_path / "run").mkdir()
    candidate = Candidate("cpu", tmp_path / "run", solution)
    candidate.start()
    try:
        assert candidate.walls
        load = candidate.request({"op": "load", "path": str(solution), "sha256": sha,
                                  "build_cache": str(root)}, 120, "load")
        assert load["ok"], load
        x = torch.randn(33)
        call = candidate.request({"op": "call", "inputs": [x]}, 120, "call")
        assert call["ok"] and torch.equal(call["outputs"][0], x * 2 + 1)
    finally:
        candidate.close()
    assert (root / "versions" / sha[:16] / "torch_extensions" / f"ext_{tag}" / "ext.so").is_file()
    if not ABI:
        pytest.skip("no Landlock here: the version may write anywhere its user may")
    assert not (root / "torch_extensions" / f"ext_{tag}").exists()
    assert not (root / "nvcc" / tag).exists()
