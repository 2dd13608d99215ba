"""The report's charts as inline SVG, drawn here so the HTML page needs nothing else: no
script, no font, no file or URL outside itself. Each mark has a <title>, which browsers show
on hover.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from krung.host.charts import FAILED_COLOR, PALETTE, Ceiling, RooflineChart, Timeline

FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif"
GRID = "#e4e4e4"
AXIS = "#555"
LEGEND_ROWS = 14
LABEL_CHARS = 42
MAX_X_LABELS = 40
# History's verdicts with no verdict on the version: no finish time, or stopped by Ctrl-C
UNFINISHED = ("running", "abandoned", "stopped")


@dataclass(frozen=True)
class Scale:
    """Data to pixels along one axis, linear or logarithmic."""

    lo: float
    hi: float
    start: float  # pixel of lo
    end: float  # pixel of hi
    log: bool = True

    def __call__(self, value: float) -> float:
        if self.log:
            lo, hi, value = math.log10(self.lo), math.log10(self.hi), math.log10(value)
        else:
            lo, hi = self.lo, self.hi
        return self.start + (value - lo) / (hi - lo) * (self.end - self.start)

    def ticks(self) -> list[float]:
        if self.log:
            first, last = round(math.log10(self.lo)), round(math.log10(self.hi))
            every = max(1, math.ceil((last - first) / 8))
            return [10.0 ** k for k in range(first, last + 1, every)]
        step = nice_step((self.hi - self.lo) / 5)
        first = math.ceil(self.lo / step)
        return [k * step for k in range(first, int(self.hi / step + 1e-9) + 1)]


def nice_step(rough: float) -> float:
    """1, 2 or 5 times a power of ten, at least `rough`."""
    power = 10 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def log_range(values: list[float]) -> tuple[float, float]:
    """Whole decades around the positive values."""
    positive = [v for v in values if v > 0 and math.isfinite(v)] or [1.0]
    lo = 10 ** math.floor(math.log10(min(positive)))
    hi = 10 ** math.ceil(math.log10(max(positive)))
    return (lo, hi * 10) if hi <= lo else (lo, hi)


def tick_label(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "start",
          extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="#222" {extra}>{escape(text)}</text>')


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1,
          dash: str = "", title: str = "") -> str:
    """A line; with a `title`, one that browsers explain on hover."""
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    head = (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="{width}"{dashes}')
    return f"{head}><title>{escape(title)}</title></line>" if title else f"{head}/>"


def marker(shape: str, x: float, y: float, fill: str, size: float = 5.5,
           stroke: str = "#222", title: str = "") -> str:
    """A point mark of one shape (circle, square, triangle, diamond, cross, star)."""
    tip = f"<title>{escape(title)}</title>" if title else ""
    style = f'fill="{fill}" stroke="{stroke}" stroke-width="0.8"'
    s = size
    if shape == "circle":
        body = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{s:.1f}" {style}>{tip}</circle>'
    elif shape == "square":
        body = (f'<rect x="{x - s:.1f}" y="{y - s:.1f}" width="{2 * s:.1f}" '
                f'height="{2 * s:.1f}" {style}>{tip}</rect>')
    else:
        points = _polygon(shape, x, y, s)
        body = f'<polygon points="{points}" {style}>{tip}</polygon>'
    return body


def _polygon(shape: str, x: float, y: float, s: float) -> str:
    if shape == "triangle":
        corners = [(0, -1.2), (1.1, 0.8), (-1.1, 0.8)]
    elif shape == "diamond":
        corners = [(0, -1.3), (1.1, 0), (0, 1.3), (-1.1, 0)]
    elif shape == "cross":
        a, b = 0.35, 1.1
        corners = [(-a, -b), (a, -b), (a, -a), (b, -a), (b, a), (a, a), (a, b), (-a, b),
                   (-a, a), (-b, a), (-b, -a), (-a, -a)]
    else:  # star
        corners = [(math.cos(math.pi / 2 + k * math.pi / 5) * (1.3 if k % 2 == 0 else 0.55),
                    -math.sin(math.pi / 2 + k * math.pi / 5) * (1.3 if k % 2 == 0 else 0.55))
                   for k in range(10)]
    return " ".join(f"{x + dx * s:.1f},{y + dy * s:.1f}" for dx, dy in corners)


def _clip(text: str, chars: int = LABEL_CHARS) -> str:
    return text if len(text) <= chars else text[:chars - 1] + "…"


def _axes(x: Scale, y: Scale, x_label: str, y_label: str,
          x_ticks: bool = True) -> list[str]:
    parts = []
    left, right = min(x.start, x.end), max(x.start, x.end)
    top, bottom = min(y.start, y.end), max(y.start, y.end)
    for value in y.ticks():
        py = y(value)
        parts.append(_line(left, py, right, py, GRID))
        parts.append(_text(left - 6, py + 4, tick_label(value), 10, "end"))
    if x_ticks:
        for value in x.ticks():
            px = x(value)
            parts.append(_line(px, top, px, bottom, GRID))
            parts.append(_text(px, bottom + 15, tick_label(value), 10, "middle"))
    parts.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" '
                 f'height="{bottom - top:.1f}" fill="none" stroke="{AXIS}"/>')
    if x_label:
        parts.append(_text((left + right) / 2, bottom + 34, x_label, 12, "middle"))
    parts.append(_text(left - 48, (top + bottom) / 2, y_label, 12, "middle",
                       f'transform="rotate(-90 {left - 48:.1f} {(top + bottom) / 2:.1f})"'))
    return parts


def _svg(width: int, height: int, element_id: str, title: str, parts: list[str]) -> str:
    return (f'<svg id="{element_id}" class="chart" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" style="{FONT}">'
            f"<title>{escape(title)}</title>"
            f'<rect width="{width}" height="{height}" fill="#fff"/>'
            + "".join(parts) + "</svg>")


def roofline_svg(chart: RooflineChart) -> str:
    """Log-log: arithmetic intensity against TFLOP/s; the memory ceilings rise to the compute
    ceilings; every version is a colour and every bench case a shape."""
    width, height = 980, 500
    left, right, top, bottom = 78, 640, 24, 440
    memory = [c for c in chart.ceilings if c.memory]
    compute = [c for c in chart.ceilings if not c.memory]
    dram = next((c for c in memory if c.name == "dram"), memory[0] if memory else None)
    ridges = [c.per_s / dram.per_s for c in compute] if dram else []
    xs = [p.intensity for p in chart.points] + ridges
    x_lo, x_hi = log_range([min(xs) / 3, max(xs) * 3])
    ys = [p.tflops for p in chart.points] + [c.per_s / 1e12 for c in compute]
    if dram:
        ys.append(dram.per_s * x_lo / 1e12)
    y_lo, y_hi = log_range([min(ys) / 2, max(ys) * 2])
    x = Scale(x_lo, x_hi, left, right)
    y = Scale(y_lo, y_hi, bottom, top)
    parts = _axes(x, y, "arithmetic intensity (FLOP / byte)", "TFLOP/s")
    roof = max((c.per_s for c in compute), default=None)
    for ceiling in memory:
        parts += _memory_ceiling(ceiling, roof, x, y, dashed=ceiling is not dram,
                                 color="#b0413e" if ceiling.stream else "#333")
    for ceiling in compute:
        start = ceiling.per_s / dram.per_s if dram else x_lo
        py = y(ceiling.per_s / 1e12)
        parts.append(_line(x(max(start, x_lo)), py, right, py, "#333", 1.6,
                           title=ceiling.chosen_by))
        parts.append(_text(x(max(start, x_lo)) + 6, py - 5, ceiling.label, 11))
    for point in chart.points:
        version = chart.versions[point.version]
        against = f"; the ceiling: {point.ceiling}" if point.ceiling else ""
        tip = (f"{version[1]} ({version[0]}), {chart.cases[point.case]}: "
               f"{point.tflops:.4g} TFLOP/s at {point.intensity:.3g} FLOP/B, "
               f"{point.pct:.0f}% of the roofline ({point.bound}-bound, {point.verdict})"
               f"{against}")
        px, py = x(point.intensity), y(point.tflops)
        if point.verdict == "suspect":
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="10" fill="none" '
                         f'stroke="{FAILED_COLOR}" stroke-width="2"/>')
        parts.append(marker(chart.marker(point.case), px, py, chart.color(point.version),
                            title=tip))
    parts += _roofline_legend(chart, right + 24, top + 4)
    return _svg(width, height, "roofline-chart", f"Roofline on {chart.device}", parts)


def _memory_ceiling(ceiling: Ceiling, roof: float | None, x: Scale, y: Scale,
                    dashed: bool, color: str = "#333") -> list[str]:
    """The diagonal bandwidth * intensity, from the chart's floor up to the top compute
    ceiling (or the chart's edge)."""
    def at(intensity: float) -> float:
        return ceiling.per_s * intensity / 1e12

    x_start = max(x.lo, y.lo * 1e12 / ceiling.per_s)
    x_end = min(x.hi, (roof / ceiling.per_s) if roof else x.hi, y.hi * 1e12 / ceiling.per_s)
    if x_end <= x_start:
        return []
    x1, y1, x2, y2 = x(x_start), y(at(x_start)), x(x_end), y(at(x_end))
    angle = math.degrees(math.atan2(y2 - y1, x2 - x1))
    lx, ly = x1 + 0.25 * (x2 - x1), y1 + 0.25 * (y2 - y1) - 6
    return [_line(x1, y1, x2, y2, color, 1.6, "6 4" if dashed else "",
                  title=ceiling.chosen_by),
            _text(lx, ly, ceiling.label, 11, "start",
                  f'transform="rotate({angle:.1f} {lx:.1f} {ly:.1f})"')]


def _roofline_legend(chart: RooflineChart, left: float, top: float) -> list[str]:
    parts = [_text(left, top + 8, "versions (oldest first)", 12, extra='font-weight="bold"')]
    row = top + 26
    shown = chart.versions[-LEGEND_ROWS:]
    if len(chart.versions) > len(shown):
        parts.append(_text(left, row, f"… {len(chart.versions) - len(shown)} older", 11))
        row += 16
    offset = len(chart.versions) - len(shown)
    for i, (run_id, label) in enumerate(shown):
        parts.append(marker("circle", left + 6, row - 4, chart.color(offset + i), 5))
        parts.append(_text(left + 18, row, _clip(f"{label} ({run_id})"), 11))
        row += 16
    row += 10
    parts.append(_text(left, row, "bench cases", 12, extra='font-weight="bold"'))
    row += 18
    for i, case in enumerate(chart.cases):
        parts.append(marker(chart.marker(i), left + 6, row - 4, "#bbb", 5))
        parts.append(_text(left + 18, row, _clip(case), 11))
        row += 16
    chosen = [c for c in chart.ceilings if c.chosen_by]
    if chosen:  # which compute ceiling, and what chose it (the whole text on hover)
        row += 10
        parts.append(_text(left, row, "compute ceilings", 12, extra='font-weight="bold"'))
        row += 18
        for ceiling in chosen:
            parts.append(_text(left, row, _clip(f"{ceiling.name}: {ceiling.chosen_by}"), 11,
                               extra=f'data-ceiling="{escape(ceiling.name)}"')
                         .replace("</text>", f"<title>{escape(ceiling.chosen_by)}</title></text>"))
            row += 16
    if any(p.verdict == "suspect" for p in chart.points):
        row += 6
        parts.append(f'<circle cx="{left + 6:.1f}" cy="{row - 4:.1f}" r="7" fill="none" '
                     f'stroke="{FAILED_COLOR}" stroke-width="2"/>')
        parts.append(_text(left + 18, row, "suspect: faster than the ceilings allow", 11))
    return parts


def timeline_svg(timeline: Timeline) -> str:
    """Three panels over the versions in the order they ran: time (log), speedup over the
    reference (log) and % of the roofline; grey lines join each run to its parent."""
    points = timeline.points
    width = 980
    left, right = 78, width - 30
    panel, gap, top = 140, 34, 16
    label_room = 120
    height = top + 3 * panel + 2 * gap + label_room
    count = len(points)
    step = (right - left - 40) / max(count - 1, 1)

    def px(i: int) -> float:
        return left + 20 + i * step if count > 1 else (left + right) / 2

    dot = 5.0 if count <= MAX_X_LABELS else 3.5  # smaller marks when they crowd
    cpu = "cpu-wall" in timeline.timers
    panels: list[tuple[str, Callable[[object], float | None], bool, str]] = [
        ("time (us, geomean)" + (" CPU wall" if cpu else ""), lambda p: p.time_us, True,
         "no run has bench times"),
        ("speedup vs reference", lambda p: p.speedup, True, "no run has bench times"),
        ("% of roofline", lambda p: p.pct, False,
         "no run has roofline figures (the roofline rung needs a GPU)"),
    ]
    parts: list[str] = []
    for n, (label, value_of, log, empty) in enumerate(panels):
        y_top = top + n * (panel + gap)
        y_bottom = y_top + panel
        values = [value_of(p) for p in points]
        known = [v for v in values if v is not None and v > 0]
        x = Scale(0, 1, left, right, log=False)
        if not known:
            parts.append(f'<rect x="{left}" y="{y_top}" width="{right - left}" height="{panel}"'
                         f' fill="#fafafa" stroke="{AXIS}"/>')
            parts.append(_text((left + right) / 2, (y_top + y_bottom) / 2, empty, 12,
                               "middle", 'fill="#777"'))
            parts.append(_text(left - 48, (y_top + y_bottom) / 2, label, 12, "middle",
                               f'transform="rotate(-90 {left - 48} {(y_top + y_bottom) / 2})"'))
            continue
        if log:
            lo, hi = log_range([min(known) / 1.5, max(known) * 1.5])
            y = Scale(lo, hi, y_bottom, y_top)
        else:
            y = Scale(0, max(110.0, max(known) * 1.1), y_bottom, y_top, log=False)
        parts += _axes(x, y, "", label, x_ticks=False)
        if not log:
            parts.append(_line(left, y(100), right, y(100), "#333", 1.2, "6 4"))
            parts.append(_text(right - 4, y(100) - 4, "roofline", 10, "end"))
        for i, point in enumerate(points):
            value = values[i]
            if point.parent is not None and value and values[point.parent]:
                parts.append(_line(px(point.parent), y(values[point.parent]), px(i), y(value),
                                   "#999", 1.2))
        for i, point in enumerate(points):
            value = values[i]
            tip = f"{point.label} ({point.run_id}): {point.verdict}"
            if value:
                tip += f", {label} {value:.4g}"
                parts.append(marker("circle", px(i), y(value), PALETTE[0] if point.ok
                                    else "#f5b7b1", dot, title=tip))
            elif n == 0 and point.verdict in UNFINISHED:  # no verdict yet, or never one
                parts.append(marker("circle", px(i), y_bottom - 8, "#fff", 4, stroke="#888",
                                    title=tip))
            elif n == 0 and not point.ok:  # a failed run has no time: mark it on the floor
                parts.append(marker("cross", px(i), y_bottom - 8, FAILED_COLOR, 5,
                                    stroke=FAILED_COLOR, title=tip))
    base = top + 3 * panel + 2 * gap
    every = math.ceil(count / MAX_X_LABELS)  # past that, label every n-th version
    for i, point in enumerate(points):
        if i % every and i != count - 1:
            continue
        lx, ly = px(i), base + 14
        parts.append(_text(lx, ly, _clip(point.label, 24), 10, "end",
                           f'transform="rotate(-40 {lx:.1f} {ly:.1f})"'))
    return _svg(width, height, "timeline-chart", f"Versions on {timeline.device}", parts)
