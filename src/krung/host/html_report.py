"""`krung report`: one self-contained HTML page for a problem's history.

The page holds everything itself (styles, inline SVG charts, no script, no URL outside it):
a summary (the best version by the stated rule, and whether it is at the roofline), the
roofline chart (every version a point per bench case), the timeline of versions (time,
speedup, % of the roofline, parent links), and per version its rungs, error figures, timings,
roofline cases, profile summary, and links to its artifact folder and files. `--png` writes
the same charts as PNG (krung.host.png, matplotlib).

The page is the Jinja2 template `krung/templates/report.html.j2`, with autoescaping on: runs
carry text a version wrote (error messages, file names), and none of it may become markup.
This module only gathers what the template shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from markupsafe import Markup

from krung.host import charts, history_tree, svg
from krung.host.report import change_text, roofline_text
from krung.host.runfiles import list_files
from krung.host.store import Store, opened
from krung.judge.ladder import specs
from krung.judge.problem import history_name
from krung.judge.rungs.spec import HTML, NOTE
from krung.protocol.errors import UsageError
from krung.protocol.results import Run, RungResult, Status, format_figures, format_value

DEFAULT_LIMIT = 200
OPEN_RUNS = 3  # the newest runs' sections start open; the others are one click away
FIGURES_CHARS = 400
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"  # package data

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;margin:0 auto;
max-width:1040px;padding:18px}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:0;display:inline}
table{border-collapse:collapse;margin:6px 0 12px;font-size:12.5px}
td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;vertical-align:top;
max-width:380px;overflow-wrap:break-word}
th{background:#f6f6f6;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.nowrap{white-space:nowrap}ul.limiters{font-size:12.5px;margin:0 0 12px}
.ok{color:#1a7f37}.failed,.error,.suspect{color:#c62828}.skipped{color:#777}
.below{color:#b26a00}.at-roofline{color:#1a7f37}
.meta{color:#555;font-size:12.5px;margin:4px 0}
.id{font-family:ui-monospace,monospace;color:#666;font-size:12px}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px;max-height:320px}
details.run{border:1px solid #e2e2e2;border-radius:6px;padding:8px 12px;margin:10px 0}
details.run>summary{cursor:pointer}
.note{color:#666;font-style:italic}
svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}
.summary p{margin:4px 0}
"""


@dataclass
class ReportFiles:
    """What `write_report` wrote."""

    html: Path
    pngs: list[Path] = field(default_factory=list)
    runs: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"html": str(self.html), "pngs": [str(p) for p in self.pngs], "runs": self.runs}


def write_report(problem: str, output: str | Path | None = None, *,
                 png_dir: str | Path | None = None, limit: int = DEFAULT_LIMIT,
                 store: str | Path | Store | None = None) -> ReportFiles:
    """Write the HTML report of a problem's runs (its name, or its directory) to `output`
    (default `report.html`), and with `png_dir` the charts as PNG files there."""
    name = history_name(str(problem))
    output = Path(output or "report.html")
    with opened(store) as db:
        entries = history_tree.entries_for(db.history(name, limit), history_tree.lookup_in(db))
        if not entries:
            raise UsageError(f"no runs of {name} in {db.path}",
                             hint=f"evaluate a version first: krung run {name} VERSION.py "
                                  "(or pass the --store the runs went to)")
        folders = {e.run.run_id: db.artifacts_dir(e.run.run_id, create=False) for e in entries}
        page = render(name, entries, folders, output.resolve().parent, str(db.path))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page, encoding="utf-8")
    files = ReportFiles(output, runs=len(entries))
    if png_dir is not None:
        from krung.host.png import write_pngs

        files.pngs = write_pngs(charts.roofline_chart([e.run for e in entries]),
                                charts.timeline(entries), Path(png_dir))
    return files


def render(problem: str, entries: list[history_tree.Entry], folders: dict[str, Path],
           page_dir: Path, store_path: str) -> str:
    """The page for `entries` (newest first); artifact links are relative to `page_dir`."""
    runs = [e.run for e in entries]
    return _template().render(
        problem=problem, css=Markup(_CSS), store_path=store_path,
        written=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        best=_best(entries), newest=_newest(entries[0]),
        roofline=_roofline(charts.roofline_chart(runs), charts.without_flops(runs)),
        timeline=_timeline(charts.timeline(entries), entries),
        runs=[_run(e, folders.get(e.run.run_id), page_dir, i < OPEN_RUNS)
              for i, e in enumerate(entries)])


def _template() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=False)
    return env.get_template("report.html.j2")


def _cell(text: Any, cls: str = "", href: str = "") -> dict[str, str]:
    return {"text": text if isinstance(text, str) else format_value(text), "cls": cls,
            "href": href}


def _best(entries: list[history_tree.Entry]) -> dict[str, Any] | None:
    chosen = history_tree.best([e.run for e in entries])
    if chosen is None:
        return None
    run, rule, among = chosen
    summary = next(e.summary for e in entries if e.run is run)
    return {"rule": rule, "among": among, "run_id": run.run_id,
            "file": charts.file_name(run.solution), "time": format_value(summary["geomean_us"]),
            "speedup": format_value(summary["speedup"]), "roofline": roofline_text(summary),
            "advice": _advice(run)}


def _newest(entry: history_tree.Entry) -> dict[str, Any]:
    return {"run_id": entry.run.run_id, "file": charts.file_name(entry.run.solution),
            "verdict": entry.summary["verdict"], "verdict_class": _verdict_class(entry.summary)}


def _advice(run: Run) -> str:
    """Keep optimising or stop, from the best run's roofline rung."""
    rung = run.rung("roofline")
    if rung is None or rung.status is Status.SKIPPED or "verdict" not in rung.figures:
        reason = f" ({rung.reason})" if rung is not None and rung.reason else ""
        return ("no roofline for this run" + reason + ": evaluate it on a GPU to learn how far "
                "it is from what the hardware allows")
    figures = rung.figures
    if figures["verdict"] == "at-roofline":
        return ("stop: every bench case is at the roofline; only less work (fewer bytes or "
                "flops) can make it faster")
    return (f"keep optimising: {format_value(figures.get('pct_of_roofline'))}% of the "
            f"roofline; the furthest case is {figures.get('worst_case')}: "
            f"{figures.get('limiter')}")


def _roofline(chart: charts.RooflineChart | None, without_flops: bool) -> dict[str, Any]:
    if chart is not None:
        return {"svg": Markup(svg.roofline_svg(chart)), "device": chart.device,
                "ceilings_from": chart.ceilings_from}
    if without_flops:
        note = ("No chart: the problem declares no flops (its flops() is 0, as for KernelBench "
                "and GPU MODE problems), so its bench cases have no arithmetic intensity to "
                "plot. Each case was placed against the DRAM bandwidth ceiling: its % of the "
                "roofline is in the tables below.")
    else:
        note = ("No run has roofline figures: the roofline rung needs a GPU (on a CPU it is "
                "skipped). Evaluate on a GPU to see every version under the device's ceilings.")
    return {"svg": None, "note": note}


def _timeline(timeline: charts.Timeline | None,
              entries: list[history_tree.Entry]) -> dict[str, Any]:
    rows = []
    for entry in entries:
        run, summary = entry.run, entry.summary
        rows.append([
            _cell(run.run_id, href=f"#run-{run.run_id}"), _cell(charts.file_name(run.solution)),
            _cell(run.started_at.replace("T", " ")[:19]),
            _cell(_verdict_text(summary), _verdict_class(summary)),
            _cell(_time(summary), "num"), _cell(_speedup(summary), "num"),
            _cell(roofline_text(summary), f"num {summary.get('roofline_verdict') or ''}"),
            _cell(run.parent, href=f"#run-{run.parent}") if run.parent else _cell("-"),
            _cell(change_text(entry.time_change), "num"), _cell(run.device)])
    found: dict[str, Any] = {
        "header": ["run", "version", "started", "verdict", "time (geomean)", "speedup",
                   "roofline", "parent", "vs parent", "device"], "rows": rows, "svg": None}
    if timeline is not None:
        found.update(svg=Markup(svg.timeline_svg(timeline)), device=timeline.device,
                     other=(f"; {timeline.left_out} run(s) on other devices are only in the "
                            "table" if timeline.left_out else ""))
    return found


def _run(entry: history_tree.Entry, folder: Path | None, page_dir: Path,
         open_: bool) -> dict[str, Any]:
    run, summary = entry.run, entry.summary
    return {
        "run_id": run.run_id, "file": charts.file_name(run.solution), "open": open_,
        "verdict": _verdict_text(summary), "verdict_class": _verdict_class(summary),
        "time": _time(summary), "roofline": roofline_text(summary),
        "started_at": run.started_at, "device": run.device, "seed": run.seed,
        "sha": run.source_sha256[:12], "solution": run.solution, "parent": run.parent,
        "parent_change": change_text(entry.time_change), "error": run.error,
        "rungs": [_rung_row(r) for r in run.rungs],
        "failures": [{"name": r.name, "error": r.error or "", "hint": r.hint,
                      "details": r.details}
                     for r in run.rungs if r.status is Status.FAILED and (r.hint or r.details)],
        "tables": [t for t in (_rung_tables(r) for r in run.rungs) if t is not None],
        "artifacts": _artifacts(folder, page_dir),
    }


def _rung_row(rung: RungResult) -> list[dict[str, str]]:
    if rung.status is Status.OK:
        text = format_figures(rung.figures)
        if len(text) > FIGURES_CHARS:
            text = text[:FIGURES_CHARS - 1] + "…"
    elif rung.status is Status.FAILED:
        text = (rung.error or "") + (f" ({rung.location})" if rung.location else "")
    else:
        text = rung.reason or ""
    return [_cell(rung.name), _cell(rung.status.value, rung.status.value),
            _cell(f"{rung.duration_s:.2f}", "num"), _cell(text)]


def _rung_tables(rung: RungResult) -> dict[str, Any] | None:
    """What a rung's declaration shows in the page (HTML, NOTE): its summary table, its
    table per case (kernel, region), and the notes too long for a column; None if nothing."""
    spec = specs().get(rung.name)
    if spec is None or rung.status is Status.SKIPPED:
        return None
    own = [f for f in spec.shown(HTML, per_case=False) if f.name in rung.figures]
    summary = {"title": spec.summary_title, "header": [f.header for f in own],
               "row": [_cell(rung.figures[f.name], _cell_class(f.name, rung.figures[f.name]))
                       for f in own]} if own else None
    rows = rung.figures.get(spec.rows) if spec.columns else None
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    columns = [f for f in spec.shown(HTML, per_case=True) if any(f.name in r for r in rows)]
    cases = {"title": spec.table_title, "header": [spec.per, *(f.header for f in columns)],
             "rows": [[_cell(spec.row_name(row)),
                       *(_cell(row.get(f.name), _cell_class(f.name, row.get(f.name)))
                         for f in columns)] for row in rows]} if columns else None
    notes = [(spec.row_name(row), _note(row[f.name])) for f in spec.shown(NOTE, per_case=True)
             for row in rows if row.get(f.name)]
    if summary is None and cases is None and not notes:
        return None
    return {"rung": rung.name, "summary": summary, "cases": cases, "notes": notes}


def _note(value: Any) -> str:
    return "; ".join(map(str, value)) if isinstance(value, list) else format_value(value)


def _cell_class(column: str, value: Any) -> str:
    if column == "verdict" and isinstance(value, str):
        return f"{value} nowrap"
    return "num" if isinstance(value, (int, float)) else ""


def _artifacts(folder: Path | None, page_dir: Path) -> dict[str, Any] | None:
    if folder is None or not folder.is_dir():
        return None
    files = list_files(folder)
    return {"href": _href(folder, page_dir), "name": folder.name,
            "profiles": ", ".join(f.name for f in files if f.kind == "profile"),
            "files": [{"href": _href(folder / f.name, page_dir), "name": f.name,
                       "kind": f.kind, "size": f.size} for f in files]}


def _href(path: Path, page_dir: Path) -> str:
    """A link to a local file, relative to the page so the two can move together."""
    try:
        relative = os.path.relpath(path.resolve(), page_dir)
    except ValueError:  # another drive (Windows): only an absolute link can reach it
        return path.resolve().as_uri()
    return Path(relative).as_posix()


def _verdict_text(summary: dict[str, Any]) -> str:
    text = summary["verdict"]
    return f"{text} ({summary['failed_rung']})" if summary["failed_rung"] else text


def _verdict_class(summary: dict[str, Any]) -> str:
    return {"ok": "ok", "failed": "failed", "error": "error"}.get(summary["verdict"], "")


def _time(summary: dict[str, Any]) -> str:
    if summary["geomean_us"] is None:
        return "-"
    cpu = " cpu" if summary["timer"] == "cpu-wall" else ""
    return f"{format_value(summary['geomean_us'])} us{cpu}"


def _speedup(summary: dict[str, Any]) -> str:
    return f"{summary['speedup']:.3g}x" if summary["speedup"] else "-"
