"""The worker's scratch folders: a judge killed outright leaves its scratch behind, and the
next judge's sweep removes it, never a live judge's (krung.judge.scratch). Real processes,
real locks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from krung.judge import scratch

HOLDER = textwrap.dedent("""
    import sys, time
    from krung.judge import scratch
    folder, _ = scratch.make(sys.argv[1])
    (folder / "cache").mkdir()
    (folder / "cache" / "kernel.cubin").write_bytes(bytes(range(256)) * 64)
    print(folder, flush=True)
    time.sleep(120)
""")


def _holder(parent) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(parent)],
                               stdout=subprocess.PIPE, text=True)
    folder = process.stdout.readline().strip()
    process.stdout.close()
    return process, folder


def test_a_dead_judges_scratch_is_swept_and_a_live_ones_is_not(tmp_path):
    dead, dead_folder = _holder(tmp_path)
    live, live_folder = _holder(tmp_path)
    mine, owner = scratch.make(tmp_path)
    not_a_scratch = tmp_path / f"krung-worker-cache-{os.getuid()}"
    not_a_scratch.mkdir()
    try:
        dead.send_signal(signal.SIGKILL)  # no cleanup of its own: what an OOM kill leaves
        dead.wait(timeout=30)
        assert os.path.isdir(dead_folder)

        removed = scratch.sweep(tmp_path)

        assert [str(f) for f in removed] == [dead_folder]
        assert not os.path.exists(dead_folder)
        assert os.path.isfile(os.path.join(live_folder, "cache", "kernel.cubin"))
        assert mine.is_dir() and not_a_scratch.is_dir()
    finally:
        live.kill()
        live.wait(timeout=30)
        scratch.remove(mine, owner)
    assert not mine.exists()
    # the live one's judge is gone now too: the next sweep takes it
    assert [str(f) for f in scratch.sweep(tmp_path)] == [live_folder]
    assert not_a_scratch.is_dir()
