"""A run's files: kinds by name, listing, reading with a size cap, through a real store."""

from __future__ import annotations

import pytest

import krung
from krung.host.runfiles import kind_of, list_files, read_file


@pytest.mark.parametrize("name, kind", [
    ("worker.log", "log"), ("add_kernel.ptx", "ptx"), ("add_kernel.sass", "sass"),
    ("add_kernel.ttir", "ttir"), ("add_kernel.ttgir", "ttgir"), ("add_kernel.llir", "llir"),
    ("add.ll", "llir"), ("add_kernel.cubin", "cubin"), ("report.ncu-rep", "profile"),
    ("profile_add.json", "profile"), ("add.json", "json"), ("notes", "other"),
    ("ADD_KERNEL.PTX", "ptx"),
])
def test_kind_comes_from_the_extension_or_the_name(name, kind):
    assert kind_of(name) == kind


@pytest.fixture
def folder(tmp_path):
    files = {"worker.log": "hello\n" * 100, "judge.log": "", "add_kernel.ptx": ".version 8.0",
             "mul_kernel.ptx": ".version 8.0 mul", "ir/add_kernel.ttir": "module {}",
             "add_kernel.cubin": "\x7fELF"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_listing_and_filters(folder):
    names = [f.name for f in list_files(folder)]
    assert names == sorted(names) and "ir/add_kernel.ttir" in names
    assert [f.name for f in list_files(folder, kind="ptx")] == ["add_kernel.ptx",
                                                                 "mul_kernel.ptx"]
    assert [f.name for f in list_files(folder, kernel="ADD")] == [
        "add_kernel.cubin", "add_kernel.ptx", "ir/add_kernel.ttir"]
    with pytest.raises(krung.UsageError, match="unknown file kind 'asm'") as caught:
        list_files(folder, kind="asm")
    assert "ptx" in caught.value.hint


def test_reading_by_name_kind_and_kernel(folder):
    assert read_file(folder, kind="ptx", kernel="mul")["text"] == ".version 8.0 mul"
    assert read_file(folder, kind="ttir")["name"] == "ir/add_kernel.ttir"
    with pytest.raises(krung.UsageError, match=r"2 ptx files: add_kernel\.ptx, mul_kernel\.ptx"):
        read_file(folder, kind="ptx")
    with pytest.raises(krung.UsageError, match="no sass file") as caught:
        read_file(folder, kind="sass")
    assert "worker.log (log)" in caught.value.hint
    with pytest.raises(krung.UsageError, match=r"no file '\.\./secret'"):
        read_file(folder, name="../secret")
    binary = read_file(folder, kind="cubin")
    assert binary["binary"] is True and binary["text"] is None


def test_reading_is_capped_and_pages(folder):
    first = read_file(folder, name="worker.log", max_bytes=250)
    assert first["text"] == ("hello\n" * 100)[:250]
    assert first["truncated"] is True and first["next_offset"] == 250 and first["size"] == 600
    rest = read_file(folder, name="worker.log", offset=first["next_offset"])
    assert first["text"] + rest["text"] == "hello\n" * 100 and rest["next_offset"] is None
    tail = read_file(folder, name="worker.log", offset=-12)
    assert tail["text"] == "hello\nhello\n" and tail["offset"] == 588


def test_files_of_a_stored_run(store, tmp_path):
    db = krung.Store(store)
    run = krung.Run(run_id="", problem="p", problem_path=str(tmp_path), solution="k.py",
                    source_sha256="0" * 64)
    db.begin(run, ["static"])
    (db.artifacts_dir(run.run_id) / "worker.log").write_text("from the worker\n")
    db.close()
    files = krung.run_files(run.run_id[:4], store=store)
    assert [(f.name, f.kind) for f in files] == [("worker.log", "log")]
    read = krung.read_run_file(run.run_id[:4], name="worker.log", store=store)
    assert read["run_id"] == run.run_id and read["text"] == "from the worker\n"
    with pytest.raises(krung.UsageError, match="no run 'zzzz'"):
        krung.run_files("zzzz", store=store)
