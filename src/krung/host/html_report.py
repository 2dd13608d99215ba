"""`krung report`: one self-contained HTML page for a problem's history.

The page holds everything itself (styles, inline SVG charts, no script, no URL outside it):
a summary (the best version by the stated rule, and whether it is at the roofline), the
roofline chart (every version a point per bench case), the timeline of versions (time,
speedup, % of the roofline, parent links), and per version its rungs, error figures, timings,
roofline cases, profile summary, and links to its artifact folder and files. `--png` writes
the same charts as PNG (krung.host.png, matplotlib).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from krung.host import charts, history_tree, svg
from krung.host.report import change_text, roofline_text
from krung.host.runfiles import list_files
from krung.host.store import Store, opened
from krung.judge.problem import history_name
from krung.protocol.errors import UsageError
from krung.protocol.results import Run, RungResult, Status, format_figures, format_value

DEFAULT_LIMIT = 200
OPEN_RUNS = 3  # the newest runs' sections start open; the others are one click away
FIGURES_CHARS = 400

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
    roofline = charts.roofline_chart(runs)
    timeline = charts.timeline(entries)
    body = [
        f"<h1>krung report: {escape(problem)}</h1>",
        f'<p class="meta">{len(entries)} run(s) from {escape(store_path)}; written '
        f'{datetime.now(timezone.utc).isoformat(timespec="seconds")}</p>',
        _summary(entries),
        '<h2 id="roofline">Roofline</h2>',
        _roofline_section(roofline, charts.without_flops(runs)),
        '<h2 id="timeline">Versions over time</h2>',
        _timeline_section(timeline, entries),
        '<h2 id="versions">Each version</h2>',
        *(_run_section(e, folders.get(e.run.run_id), page_dir, i < OPEN_RUNS)
          for i, e in enumerate(entries)),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>krung report: {escape(problem)}</title><style>{_CSS}</style></head>"
            "<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _summary(entries: list[history_tree.Entry]) -> str:
    runs = [e.run for e in entries]
    lines = []
    chosen = history_tree.best(runs)
    if chosen is None:
        lines.append("<p>No run has passed every rung with bench times yet.</p>")
    else:
        run, rule, among = chosen
        summary = next(e.summary for e in entries if e.run is run)
        lines.append(
            f'<p><b>Best</b> ({escape(rule)}, of {among}): {_run_link(run)} '
            f"{escape(charts.file_name(run.solution))}: "
            f"{format_value(summary['geomean_us'])} us, speedup "
            f"{format_value(summary['speedup'])}x, roofline {escape(roofline_text(summary))}</p>")
        lines.append(f"<p><b>Next</b>: {escape(_advice(run))}</p>")
    newest = entries[0]
    lines.append(f"<p><b>Newest</b>: {_run_link(newest.run)} "
                 f"{escape(charts.file_name(newest.run.solution))}, "
                 f'<span class="{_verdict_class(newest.summary)}">'
                 f"{escape(newest.summary['verdict'])}</span></p>")
    return '<section class="summary">' + "".join(lines) + "</section>"


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


def _roofline_section(chart: charts.RooflineChart | None, without_flops: bool = False) -> str:
    if chart is None and without_flops:
        return ('<p class="note">No chart: the problem declares no flops (its flops() is 0, as '
                "for KernelBench and GPU MODE problems), so its bench cases have no arithmetic "
                "intensity to plot. Each case was placed against the DRAM bandwidth ceiling: "
                "its % of the roofline is in the tables below.</p>")
    if chart is None:
        return ('<p class="note">No run has roofline figures: the roofline rung needs a GPU '
                "(on a CPU it is skipped). Evaluate on a GPU to see every version under the "
                "device's ceilings.</p>")
    return (f'<p class="meta">{escape(chart.device)}; ceilings {escape(chart.ceilings_from)}.'
            " Each colour is a version, each shape a bench case; hover a point for its "
            "figures.</p>" + svg.roofline_svg(chart))


def _timeline_section(timeline: charts.Timeline | None, entries: list[history_tree.Entry]) -> str:
    parts = []
    if timeline is not None:
        other = (f"; {timeline.left_out} run(s) on other devices are only in the table"
                 if timeline.left_out else "")
        parts.append(f'<p class="meta">{escape(timeline.device)}, oldest first; grey lines '
                     f"join a version to its parent{escape(other)}.</p>")
        parts.append(svg.timeline_svg(timeline))
    rows = []
    for entry in entries:
        run, summary = entry.run, entry.summary
        parent = _run_link_id(run.parent) if run.parent else "-"
        rows.append(
            f"<tr><td>{_run_link(run)}</td><td>{escape(charts.file_name(run.solution))}</td>"
            f"<td>{escape(run.started_at.replace('T', ' ')[:19])}</td>"
            f'<td class="{_verdict_class(summary)}">{escape(_verdict_text(summary))}</td>'
            f'<td class="num">{_time(summary)}</td>'
            f'<td class="num">{_speedup(summary)}</td>'
            f'<td class="num {summary.get("roofline_verdict") or ""}">'
            f"{escape(roofline_text(summary))}</td>"
            f"<td>{parent}</td><td class=\"num\">{escape(change_text(entry.time_change))}</td>"
            f"<td>{escape(run.device)}</td></tr>")
    parts.append(_table(["run", "version", "started", "verdict", "time (geomean)", "speedup",
                         "roofline", "parent", "vs parent", "device"], rows))
    return "".join(parts)


def _run_section(entry: history_tree.Entry, folder: Path | None, page_dir: Path,
                 open_: bool) -> str:
    run, summary = entry.run, entry.summary
    head = (f"<summary><h3>{escape(charts.file_name(run.solution))}</h3> "
            f'<span class="id">{escape(run.run_id)}</span> '
            f'<span class="{_verdict_class(summary)}">{escape(_verdict_text(summary))}</span>'
            f" {_time(summary)} {escape(roofline_text(summary))}</summary>")
    parent = ""
    if run.parent:
        parent = (f" · parent {_run_link_id(run.parent)} "
                  f"({escape(change_text(entry.time_change))} time)")
    meta = (f'<p class="meta">started {escape(run.started_at)} · {escape(run.device)} · seed '
            f"{run.seed} · sha256 {escape(run.source_sha256[:12])} · "
            f"{escape(run.solution)}{parent}</p>")
    parts = [head, meta]
    if run.error:
        parts.append(f"<p class=\"error\">krung failed: </p><pre>{escape(run.error)}</pre>")
    parts.append(_rung_table(run))
    for rung in run.rungs:
        if rung.status is Status.FAILED and (rung.hint or rung.details):
            parts.append(_failure(rung))
    parts.append(_error_figures(run.rung("correctness")))
    parts.append(_case_table(run.rung("benchmark"), "bench cases",
                             ["median_us", "p10_us", "p90_us", "ci_pct", "ref_median_us",
                              "speedup", "timer", "kernels_per_call", "launch_bound",
                              "sm_mhz_timed"]))
    parts.append(_case_table(run.rung("roofline"), "roofline per bench case",
                             ["precision", "median_us", "roofline_us", "tflops", "gbps",
                              "intensity", "bound", "ceiling", "pct", "verdict"]))
    parts.append(_limiters(run.rung("roofline")))
    parts.append(_profile(run.rung("profile")))
    parts.append(_artifacts(folder, page_dir))
    opened_attr = " open" if open_ else ""
    return (f'<details class="run" id="run-{escape(run.run_id)}"{opened_attr}>'
            + "".join(p for p in parts if p) + "</details>")


def _rung_table(run: Run) -> str:
    rows = []
    for rung in run.rungs:
        if rung.status is Status.OK:
            text = format_figures(rung.figures)
            if len(text) > FIGURES_CHARS:
                text = text[:FIGURES_CHARS - 1] + "…"
        elif rung.status is Status.FAILED:
            text = (rung.error or "") + (f" ({rung.location})" if rung.location else "")
        else:
            text = rung.reason or ""
        rows.append(f"<tr><td>{escape(rung.name)}</td>"
                    f'<td class="{rung.status.value}">{rung.status.value}</td>'
                    f'<td class="num">{rung.duration_s:.2f}</td><td>{escape(text)}</td></tr>')
    return _table(["rung", "status", "s", "figures, error or reason"], rows)


def _failure(rung: RungResult) -> str:
    parts = [f"<p><b>{escape(rung.name)}</b>: {escape(rung.error or '')}</p>"]
    if rung.hint:
        parts.append(f"<p><b>hint</b>: {escape(rung.hint)}</p>")
    if rung.details:
        parts.append(f"<pre>{escape(rung.details)}</pre>")
    return "".join(parts)


_ERROR_FIGURES = ("cases", "passed", "max_abs_err", "max_rel_err", "mse", "rmse", "psnr_db",
                  "cossim", "worst_case", "unseen_cases")


def _error_figures(rung: RungResult | None) -> str:
    if rung is None or rung.status is Status.SKIPPED:
        return ""
    figures = rung.figures
    shown = [(k, figures[k]) for k in _ERROR_FIGURES if k in figures]
    if not shown:
        return ""
    head = "".join(f"<th>{escape(k)}</th>" for k, _ in shown)
    row = "".join(f'<td class="num">{escape(format_value(v))}</td>' for _, v in shown)
    return ("<p><b>error figures</b> (correctness)</p>"
            f"<table><tr>{head}</tr><tr>{row}</tr></table>"
            + _case_table(rung, "", ["passed", "seeds", "max_abs_err", "max_rel_err",
                                     "mismatches"]))


def _case_table(rung: RungResult | None, title: str, columns: list[str]) -> str:
    if rung is None:
        return ""
    rows = rung.figures.get("per_case") or []
    if not rows:
        return ""
    present = [c for c in columns if any(c in r for r in rows)]
    body = []
    for row in rows:
        cells = "".join(f'<td class="{_cell_class(c, row.get(c))}">'
                        f"{escape(format_value(row.get(c)))}</td>" for c in present)
        body.append(f"<tr><td>{escape(str(row.get('case')))}</td>{cells}</tr>")
    caption = f"<p><b>{escape(title)}</b></p>" if title else ""
    return caption + _table(["case", *present], body)


def _cell_class(column: str, value: Any) -> str:
    if column == "verdict" and isinstance(value, str):
        return f"{value} nowrap"
    return "num" if isinstance(value, (int, float)) else ""


def _limiters(rung: RungResult | None) -> str:
    """Each case's likely limiter, in words (too long for a table column)."""
    rows = [r for r in (rung.figures.get("per_case") or []) if r.get("limiter")] \
        if rung is not None else []
    if not rows:
        return ""
    items = "".join(f"<li>{escape(str(r['case']))}: {escape(str(r['limiter']))}</li>"
                    for r in rows)
    return f'<ul class="limiters">{items}</ul>'



def _profile(rung: RungResult | None) -> str:
    if rung is None:
        return ""
    if rung.status is not Status.OK:
        return (f"<p><b>profile</b>: <span class=\"{rung.status.value}\">{rung.status.value}"
                f"</span> {escape(rung.reason or rung.error or '')}</p>")
    return f"<p><b>profile summary</b>: {escape(format_figures(rung.figures))}</p>" + \
        _case_table(rung, "", [k for k in _first_row_keys(rung) if k != "case"])


def _first_row_keys(rung: RungResult) -> list[str]:
    rows = rung.figures.get("per_case") or [{}]
    return list(rows[0]) if isinstance(rows[0], dict) else []


def _artifacts(folder: Path | None, page_dir: Path) -> str:
    if folder is None or not folder.is_dir():
        return '<p class="meta">artifacts: no folder for this run in this store</p>'
    files = list_files(folder)
    links = [f'<a href="{escape(_href(folder / f.name, page_dir))}">{escape(f.name)}</a> '
             f'<span class="meta">{escape(f.kind)}, {f.size} B</span>' for f in files]
    profiles = [f.name for f in files if f.kind == "profile"]
    profile_note = f" · profile: {escape(', '.join(profiles))}" if profiles else ""
    return (f'<p class="meta">artifacts: <a href="{escape(_href(folder, page_dir))}/">'
            f"{escape(folder.name)}/</a>{profile_note}</p>"
            + ("<ul>" + "".join(f"<li>{link}</li>" for link in links) + "</ul>" if links
               else ""))


def _href(path: Path, page_dir: Path) -> str:
    """A link to a local file, relative to the page so the two can move together."""
    try:
        relative = os.path.relpath(path.resolve(), page_dir)
    except ValueError:  # another drive (Windows): only an absolute link can reach it
        return path.resolve().as_uri()
    return Path(relative).as_posix()


def _table(header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _run_link(run: Run) -> str:
    return _run_link_id(run.run_id)


def _run_link_id(run_id: str) -> str:
    return f'<a class="id" href="#run-{escape(run_id)}">{escape(run_id)}</a>'


def _verdict_text(summary: dict[str, Any]) -> str:
    text = summary["verdict"]
    return f"{text} ({summary['failed_rung']})" if summary["failed_rung"] else text


def _verdict_class(summary: dict[str, Any]) -> str:
    return {"ok": "ok", "failed": "failed", "error": "error"}.get(summary["verdict"], "")


def _time(summary: dict[str, Any]) -> str:
    if summary["geomean_us"] is None:
        return "-"
    cpu = " cpu" if summary["timer"] == "cpu-wall" else ""
    return f"{escape(format_value(summary['geomean_us']))} us{cpu}"


def _speedup(summary: dict[str, Any]) -> str:
    return f"{summary['speedup']:.3g}x" if summary["speedup"] else "-"
