"""The report's charts as PNG files, for terminals and notes, drawn with matplotlib (the
optional `krung[report]` extra; the HTML report itself needs nothing)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from krung.host.charts import FAILED_COLOR, PALETTE, RooflineChart, Timeline
from krung.host.svg import MAX_X_LABELS, log_range, tick_label
from krung.protocol.errors import UsageError

# charts.MARKERS in matplotlib's letters
_MARKERS = {"circle": "o", "square": "s", "triangle": "^", "diamond": "D", "cross": "P",
            "star": "*"}
DPI = 110


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--png needs matplotlib, which is not installed",
                         hint="pip install 'krung[report]' (the HTML report needs nothing "
                              "extra)") from None
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def write_pngs(roofline: RooflineChart | None, timeline: Timeline | None,
               folder: Path) -> list[Path]:
    """roofline.png and timeline.png in `folder` (those there are data for)."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if roofline is not None:
        written.append(_save(plt, _roofline(plt, roofline), folder / "roofline.png"))
    if timeline is not None:
        written.append(_save(plt, _timeline(plt, timeline), folder / "timeline.png"))
    return written


def _save(plt: Any, figure: Any, path: Path) -> Path:
    figure.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": "krung"})
    plt.close(figure)
    return path


def _roofline(plt: Any, chart: RooflineChart) -> Any:
    figure, axes = plt.subplots(figsize=(10, 5.6))
    axes.set_xscale("log")
    axes.set_yscale("log")
    memory = [c for c in chart.ceilings if c.memory]
    compute = [c for c in chart.ceilings if not c.memory]
    dram = next((c for c in memory if c.name == "dram"), memory[0] if memory else None)
    xs = [p.intensity for p in chart.points]
    xs += [c.per_s / dram.per_s for c in compute] if dram else []
    x_lo, x_hi = log_range([min(xs) / 3, max(xs) * 3])  # the same decades as the SVG
    ys = [p.tflops for p in chart.points] + [c.per_s / 1e12 for c in compute]
    ys += [dram.per_s * x_lo / 1e12] if dram else []
    y_lo, y_hi = log_range([min(ys) / 2, max(ys) * 2])
    axes.set_xlim(x_lo, x_hi)
    axes.set_ylim(y_lo, y_hi)
    _plain_ticks(axes)
    roof = max((c.per_s for c in compute), default=None)
    for ceiling in memory:
        x_end = min(x_hi, roof / ceiling.per_s) if roof else x_hi
        axes.plot([x_lo, x_end], [ceiling.per_s * x_lo / 1e12, ceiling.per_s * x_end / 1e12],
                  color="#333", linestyle="-" if ceiling is dram else "--", linewidth=1.4,
                  label=ceiling.label)
    for ceiling in compute:
        start = ceiling.per_s / dram.per_s if dram else x_lo
        axes.plot([start, x_hi], [ceiling.per_s / 1e12] * 2, color="#333", linewidth=1.4)
        axes.annotate(ceiling.label, (start, ceiling.per_s / 1e12), textcoords="offset points",
                      xytext=(6, 4), ha="left", fontsize=9)
    for index, (run_id, label) in enumerate(chart.versions):
        for point in (p for p in chart.points if p.version == index):
            axes.scatter(point.intensity, point.tflops, color=chart.color(index),
                         marker=_MARKERS[chart.marker(point.case)], edgecolors="#222",
                         linewidths=0.6, s=48, zorder=3)
            if point.verdict == "suspect":
                axes.scatter(point.intensity, point.tflops, s=200, facecolors="none",
                             edgecolors=FAILED_COLOR, linewidths=1.8, zorder=2)
        axes.scatter([], [], color=chart.color(index), label=f"{label} ({run_id})")
    for index, case in enumerate(chart.cases):
        axes.scatter([], [], color="#bbb", edgecolors="#222",
                     marker=_MARKERS[chart.marker(index)], label=case)
    axes.set_xlabel("arithmetic intensity (FLOP / byte)")
    axes.set_ylabel("TFLOP/s")
    axes.set_title(f"Roofline on {chart.device}", fontsize=11)
    axes.grid(True, which="major", color="#e4e4e4")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return figure


def _plain_ticks(axes: Any, x: bool = True) -> None:
    """Tick labels as plain numbers (200, 1k), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda value, _: tick_label(value))
    for axis in ([axes.xaxis] if x else []) + [axes.yaxis]:
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())


def _timeline(plt: Any, timeline: Timeline) -> Any:
    points = timeline.points
    figure, panels = plt.subplots(3, 1, figsize=(10, 7.5), sharex=True)
    positions = list(range(len(points)))
    series = [("time (us, geomean)", [p.time_us for p in points], True),
              ("speedup vs reference", [p.speedup for p in points], True),
              ("% of roofline", [p.pct for p in points], False)]
    for axes, (label, values, log) in zip(panels, series, strict=True):
        axes.set_ylabel(label, fontsize=9)
        axes.grid(True, color="#e4e4e4")
        known = [(i, v) for i, v in zip(positions, values, strict=True) if v]
        if not known:
            axes.text(0.5, 0.5, "no figures", transform=axes.transAxes, ha="center",
                      color="#777")
            axes.set_yticks([])
            continue
        if log:
            axes.set_yscale("log")
            _plain_ticks(axes, x=False)
        else:
            axes.axhline(100, color="#333", linestyle="--", linewidth=1)
            axes.set_ylim(0, max(110, max(v for _, v in known) * 1.1))
        for i, point in enumerate(points):
            if point.parent is not None and values[i] and values[point.parent]:
                axes.plot([point.parent, i], [values[point.parent], values[i]], color="#999",
                          linewidth=1, zorder=1)
        colors = [PALETTE[0] if points[i].ok else "#f5b7b1" for i, _ in known]
        axes.scatter([i for i, _ in known], [v for _, v in known], c=colors,
                     edgecolors="#222", linewidths=0.6, s=36, zorder=3)
    failed = [i for i, p in enumerate(points) if not p.ok and not p.time_us]
    if failed and any(p.time_us for p in points):
        low = min(p.time_us for p in points if p.time_us)
        panels[0].scatter(failed, [low / 1.3] * len(failed), marker="x", color=FAILED_COLOR,
                          s=40, label="failed")
        panels[0].legend(fontsize=8, frameon=False)
    every = math.ceil(len(points) / MAX_X_LABELS)  # past that, label every n-th version
    shown = [i for i in positions if i % every == 0 or i == len(points) - 1]
    panels[-1].set_xticks(shown)
    panels[-1].set_xticklabels([points[i].label for i in shown], rotation=40, ha="right",
                               fontsize=8)
    panels[0].set_title(f"Versions on {timeline.device}", fontsize=11)
    figure.tight_layout()
    return figure
