"""`watch`: evaluate a version, then again each time its file is saved.

The file is polled (its mtime and size, every `interval_s`; stdlib only, nothing to install)
and a change counts once it has held still for one more poll, so an editor that saves in
several writes starts one evaluation, not several. What happens is told to an observer (the
CLI's display); Ctrl-C arrives as KeyboardInterrupt, for the caller to end cleanly. The store's
warm evaluation service runs as long as the watch (krung.host.service): each evaluation after
the first gets a judge started while the file was being edited.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Protocol

from krung.host.evaluate import evaluate
from krung.host.service import serving
from krung.host.store import Store
from krung.protocol.errors import KrungError
from krung.protocol.results import Run, RungResult
from krung.protocol.settings import Settings

POLL_S = 0.5


class WatchObserver(Protocol):
    def started(self, number: int, version: Path) -> None: ...
    def env(self, env: dict) -> None: ...
    def progress(self, rung: str, message: str) -> None: ...
    def result(self, result: RungResult) -> None: ...
    def finished(self, run: Run) -> None: ...
    def failed(self, error: KrungError) -> None: ...
    def waiting(self, version: Path) -> None: ...


def watch(problem: str | Path, version: str | Path, observer: WatchObserver, *,
          max_runs: int | None = None, interval_s: float = POLL_S,
          **options: Any) -> Run | None:
    """Evaluate `version` now and after every save, until `max_runs` evaluations (forever
    by default). `options` go to `evaluate` (rungs, device, seed, settings, store).

    Returns the last Run, or None when the last evaluation could not start (a broken
    problem, a missing file: told to `observer.failed`, and the watch goes on).
    """
    settings = options.get("settings") or Settings.from_env()
    store = options.get("store")
    if store is not None:
        settings = settings.replace(store=store.path if isinstance(store, Store) else store)
    with serving(settings.replace(device=options.get("device"))):
        return _watch(problem, Path(version), observer, max_runs, interval_s, options)


def _watch(problem: str | Path, path: Path, observer: WatchObserver, max_runs: int | None,
           interval_s: float, options: dict[str, Any]) -> Run | None:
    count = 0
    last: Run | None = None
    while True:
        seen = _signature(path)  # taken first, so a save during the evaluation is not missed
        count += 1
        observer.started(count, path)
        try:
            last = evaluate(problem, path, on_result=observer.result,
                            on_progress=observer.progress, on_env=observer.env, **options)
            observer.finished(last)
        except KrungError as exc:
            last = None
            observer.failed(exc)
        if max_runs is not None and count >= max_runs:
            return last
        observer.waiting(path)
        _wait_for_change(path, seen, interval_s)


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None  # mid-save (some editors replace the file) or deleted: wait
    return stat.st_mtime_ns, stat.st_size


def _wait_for_change(path: Path, seen: tuple[int, int] | None, interval_s: float) -> None:
    while True:
        time.sleep(interval_s)
        current = _signature(path)
        if current is None or current == seen:
            continue
        time.sleep(interval_s)  # debounce: the save must hold still for one more poll
        if _signature(path) == current:
            return
