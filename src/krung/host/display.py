"""Live displays for long work: `krung run`'s progress and `krung watch`'s screen.

On a terminal, rich draws them in place (a progress bar with the rung and case i/n; a live
view of the rung lines as they come in). Elsewhere (a pipe, a file, an agent reading the
output) they are plain lines: progress at most once a second on stderr, so a log stays short.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.spinner import Spinner
from rich.text import Text

from krung.host import report
from krung.protocol.errors import KrungError
from krung.protocol.results import Run, RungResult

_CASE = re.compile(r"case (\d+)/(\d+)\s*(.*)")


class PlainProgress:
    """Progress as lines `[rung] message`, at most one per `min_interval_s`.

    A message that comes sooner is held back and written when the interval is up (the
    latest one wins), unless its rung has finished by then: the line always says where the
    work is now, never where it was.
    """

    def __init__(self, stream: TextIO, min_interval_s: float = 1.0):
        self._stream = stream
        self._interval = min_interval_s
        self._lock = threading.Lock()
        self._last = -math.inf
        self._pending: str | None = None
        self._timer: threading.Timer | None = None

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, rung: str, message: str) -> None:
        line = f"[{rung}] {message}"
        with self._lock:
            wait = self._last + self._interval - time.monotonic()
            if wait <= 0:
                self._write(line)
                return
            self._pending = line
            if self._timer is None:
                self._timer = threading.Timer(wait, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def rung_done(self, result: RungResult | None = None) -> None:
        with self._lock:
            self._pending = None

    def close(self) -> None:
        with self._lock:
            self._pending = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._pending is not None:
                self._write(self._pending)

    def _write(self, line: str) -> None:  # with the lock held
        self._pending = None
        self._last = time.monotonic()
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # the reader went away; progress is not worth a crash
            pass


class BarProgress:
    """A rich progress bar on a terminal: the rung, the case i/n, elapsed time."""

    def __init__(self, console: Console, planned: Iterable[str]):
        self._planned = list(planned)
        self._done: set[str] = set()
        # markup=False: `[static]` is text here, not a rich style tag.
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False),
                             BarColumn(), TextColumn("{task.fields[count]}", markup=False),
                             TimeElapsedColumn(), console=console, transient=True)
        self._task = self._bar.add_task(self._next(), total=None, count="")

    def __enter__(self) -> BarProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, rung: str, message: str) -> None:
        case = _CASE.match(message)
        if case:
            index, total, label = int(case[1]), int(case[2]), case[3]
            self._bar.update(self._task, description=f"[{rung}] {label}", total=total,
                             completed=index - 1, count=f"case {index}/{total}", refresh=True)
        else:
            self._bar.update(self._task, description=f"[{rung}] {message}", total=None,
                             count="", refresh=True)

    def rung_done(self, result: RungResult) -> None:
        self._done.add(result.name)
        self._bar.update(self._task, description=self._next(), total=None, completed=0,
                         count="", refresh=True)

    def close(self) -> None:
        self._bar.stop()

    def _next(self) -> str:
        waiting = [name for name in self._planned if name not in self._done]
        return f"[{waiting[0]}]" if waiting else "finishing"


def run_progress(console: Console, planned: Iterable[str]) -> BarProgress | PlainProgress:
    """A bar where `console` is a terminal, plain throttled lines on its stream elsewhere."""
    if console.is_terminal:
        return BarProgress(console, planned)
    return PlainProgress(console.file)


class PlainWatch:
    """`krung watch` where the output is not a terminal: plain lines, flushed as they come."""

    def __init__(self, out: Console, err: Console):
        self._out = out
        self._err = err
        self._progress = PlainProgress(err.file)
        self._env_shown = False

    def __enter__(self) -> PlainWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.close()

    def started(self, number: int, version: Path) -> None:
        self._print(f"--- run {number} of {version} ({_clock()})")

    def env(self, env: dict) -> None:
        if not self._env_shown:
            self._print(report.device_notice(env))
            self._env_shown = True

    def progress(self, rung: str, message: str) -> None:
        self._progress.update(rung, message)

    def result(self, result: RungResult) -> None:
        self._progress.rung_done(result)
        for line in report.rung_block(result):
            self._print(line)

    def finished(self, run: Run) -> None:
        for table in (report.case_table(r) for r in run.rungs):
            if table is not None:
                self._out.print()
                self._out.print(table)
        self._out.print()
        self._print(report.verdict(run))

    def failed(self, error: KrungError) -> None:
        self._print(f"{type(error).__name__}: {error.message}")
        if error.hint:
            self._print(f"hint: {error.hint}")

    def waiting(self, version: Path) -> None:
        self._print(f"watching {version} for changes (Ctrl-C to stop)")

    def _print(self, line: str) -> None:
        self._out.print(line, markup=False, highlight=False)
        self._out.file.flush()


class LiveWatch:
    """`krung watch` on a terminal: the current run's rung lines, drawn in place as they
    come in, under a one-line history of the earlier verdicts."""

    def __init__(self, out: Console):
        self._out = out
        self._history: list[str] = []
        self._lines: list[str] = []
        self._tables: list[RenderableType] = []
        self._notice = ""
        self._status = "starting"
        self._busy = True
        self._spinner = Spinner("dots")
        self._live = Live(console=out, get_renderable=self._render, refresh_per_second=8,
                          transient=False)

    def __enter__(self) -> LiveWatch:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._busy = False
        self._status = "stopped watching"
        self._live.stop()  # the last drawing stays on the screen

    def started(self, number: int, version: Path) -> None:
        self._number, self._version = number, version
        self._lines, self._tables = [], []
        self._busy = True
        self._status = f"run {number} of {version} ({_clock()})"

    def env(self, env: dict) -> None:
        self._notice = report.device_notice(env)

    def progress(self, rung: str, message: str) -> None:
        self._status = f"[{rung}] {message}"

    def result(self, result: RungResult) -> None:
        self._lines = [*self._lines, *report.rung_block(result)]
        self._status = f"{result.name} done"

    def finished(self, run: Run) -> None:
        self._tables = [t for t in (report.case_table(r) for r in run.rungs) if t is not None]
        verdict = report.verdict(run)
        self._lines = [*self._lines, verdict]
        self._history.append(f"#{self._number} {verdict.split()[0]}")

    def failed(self, error: KrungError) -> None:
        lines = [f"{type(error).__name__}: {error.message}"]
        if error.hint:
            lines.append(f"hint: {error.hint}")
        self._lines = [*self._lines, *lines]
        self._history.append(f"#{self._number} {type(error).__name__}")

    def waiting(self, version: Path) -> None:
        self._busy = False
        self._status = f"watching {version} for changes (Ctrl-C to stop)"

    def _render(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self._history:
            parts.append(Text("runs: " + "  ".join(self._history[-10:]), style="dim"))
        if self._notice:
            parts.append(Text(self._notice, style="dim"))
        parts += [Text(line) for line in self._lines]
        for table in self._tables:
            parts += [Text(""), table]
        if self._busy:
            self._spinner.update(text=Text(self._status))
            parts.append(self._spinner)
        else:
            parts.append(Text(self._status, style="dim"))
        return Group(*parts)


def watch_display(out: Console, err: Console) -> LiveWatch | PlainWatch:
    return LiveWatch(out) if out.is_terminal else PlainWatch(out, err)


def _clock() -> str:
    return datetime.now().strftime("%H:%M:%S")
