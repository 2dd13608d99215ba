"""What the report's charts show, as plain data drawn from recorded runs: the roofline (every
version a point per bench case, under the device's ceilings) and the timeline of versions
(time, speedup, % of the roofline, and the parent links).

Drawn as inline SVG by krung.host.svg (the HTML report) and as PNG by krung.host.png (matplotlib).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from krung.protocol.results import UNKNOWN_DEVICE, Run

if TYPE_CHECKING:
    from krung.host.history_tree import Entry

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
MARKERS = ("circle", "square", "triangle", "diamond", "cross", "star")
FAILED_COLOR = "#d62728"


@dataclass(frozen=True)
class Ceiling:
    name: str  # dram, l2, smem, fp32, bf16, ..., or a pipe (fma, mufu, issue)
    per_s: float  # bytes/s for memory ceilings, flops/s for compute ones
    memory: bool  # a bandwidth, drawn as a diagonal (a pipe's instruction stream is one too)
    # What chose a compute ceiling ("SASS: HGMMA x4", "the dtype (bf16), assumed: ..."),
    # empty for the measured memory ceilings.
    chosen_by: str = ""
    stream: bool = False  # the bytes/s a kernel's instruction stream can move (its pipes)

    @property
    def label(self) -> str:
        if self.stream:
            return f"{self.name} (SASS) {self.per_s / 1e12:.3g} TB/s"
        if self.memory:
            return f"{self.name.upper()} {self.per_s / 1e12:.3g} TB/s"
        assumed = " (dtype, assumed)" if "assumed" in self.chosen_by else \
            (" (SASS)" if self.chosen_by.startswith("SASS") else "")
        return f"{self.name}{assumed} {self.per_s / 1e12:.4g} TFLOP/s"


@dataclass(frozen=True)
class RooflinePoint:
    version: int  # index into RooflineChart.versions
    case: int  # index into RooflineChart.cases
    intensity: float  # flops per byte
    tflops: float
    pct: float
    verdict: str
    bound: str
    ceiling: str = ""  # the binding ceiling, for people ("DRAM bandwidth", "the FP32 FMA pipe")


@dataclass
class RooflineChart:
    device: str
    ceilings_from: str
    ceilings: list[Ceiling]
    versions: list[tuple[str, str]]  # (run id, version file name), oldest first
    cases: list[str]
    points: list[RooflinePoint] = field(default_factory=list)

    def color(self, version: int) -> str:
        return PALETTE[version % len(PALETTE)]

    def marker(self, case: int) -> str:
        return MARKERS[case % len(MARKERS)]


def file_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def roofline_chart(runs: list[Run]) -> RooflineChart | None:
    """Every placed bench case of every run (any order) on the device of the newest run that
    has roofline figures, under that run's ceilings; None when no run has them."""
    placed = [r for r in sorted(runs, key=_age) if _roofline_rows(r)]
    if not placed:
        return None
    newest = placed[-1]
    placed = [r for r in placed if r.device == newest.device]
    figures = newest.rung("roofline").figures  # type: ignore[union-attr]
    chart = RooflineChart(device=newest.device, ceilings_from=str(figures.get("ceilings_from")),
                          ceilings=_ceilings(figures, placed), versions=[], cases=[])
    for run in placed:
        chart.versions.append((run.run_id, file_name(run.solution)))
        for row in _roofline_rows(run):
            if row["case"] not in chart.cases:
                chart.cases.append(row["case"])
            chart.points.append(RooflinePoint(
                version=len(chart.versions) - 1, case=chart.cases.index(row["case"]),
                intensity=float(row["intensity"]), tflops=float(row["tflops"]),
                pct=float(row["pct"]), verdict=str(row["verdict"]), bound=str(row["bound"]),
                ceiling=str(row.get("ceiling_label") or row.get("ceiling") or "")))
    return chart


def _ceilings(figures: dict[str, Any], placed: list[Run]) -> list[Ceiling]:
    """The memory ceilings the newest run measured, and the compute ceilings its cases were
    placed under (each with what chose it); for runs from before the compute ceiling was
    chosen from the SASS, the measured peaks of the precisions their cases ran at."""
    memory = [Ceiling(row["ceiling"], float(row.get("used") or row["measured"]), True)
              for row in figures.get("ceilings") or []
              if row.get("unit") == "B/s" and (row.get("used") or row.get("measured"))]
    chosen = figures.get("compute_ceilings")
    if chosen is None:
        used = {row.get("precision") for r in placed for row in _roofline_rows(r)}
        return memory + [Ceiling(row["ceiling"], float(row["measured"]), False)
                         for row in figures.get("ceilings") or []
                         if row.get("unit") == "FLOP/s" and row.get("measured")
                         and row.get("ceiling") in used]
    compute = []
    for row in chosen:
        why = str(row.get("ceiling_chosen_by") or "")
        if row.get("compute_bytes_per_s"):
            compute.append(Ceiling(str(row["compute_ceiling"]), float(row["compute_bytes_per_s"]),
                                   True, why, stream=True))
        elif row.get("compute_per_s"):
            compute.append(Ceiling(str(row["compute_ceiling"]), float(row["compute_per_s"]),
                                   False, why))
    return memory + compute

def without_flops(runs: list[Run]) -> bool:
    """Whether runs have roofline figures that no chart can show: their cases were placed
    against the bandwidth ceiling, but the problem declares no flops (KernelBench and GPU MODE
    problems), so no case has an arithmetic intensity to plot."""
    return any(row.get("verdict") and not row.get("flops")
               for run in runs if run.rung("roofline") is not None
               for row in run.rung("roofline").figures.get("per_case") or [])  # type: ignore[union-attr]


def _roofline_rows(run: Run) -> list[dict[str, Any]]:
    """The bench cases a run placed under its roofline (a suspect one too)."""
    rung = run.rung("roofline")
    if rung is None:
        return []
    return [row for row in rung.figures.get("per_case") or []
            if row.get("verdict") and row.get("intensity") and row.get("tflops")]


def _age(run: Run) -> str:
    return run.started_at


@dataclass(frozen=True)
class TimelinePoint:
    run_id: str
    label: str  # the version file's name
    ok: bool
    verdict: str  # ok, failed (rung), error
    time_us: float | None
    speedup: float | None
    pct: float | None
    parent: int | None  # index of the parent in Timeline.points, when it is there
    timer: str | None


@dataclass
class Timeline:
    device: str
    points: list[TimelinePoint]  # oldest first
    left_out: int = 0  # runs on other devices

    @property
    def timers(self) -> set[str]:
        return {p.timer for p in self.points if p.timer}


def timeline(entries: list[Entry]) -> Timeline | None:
    """The runs on the device of the newest run whose device is known (a run in flight has
    none yet), oldest first, with their parent links."""
    if not entries:
        return None
    device = next((e.run.device for e in entries if e.run.device != UNKNOWN_DEVICE),
                  entries[0].run.device)
    mine = [e for e in reversed(entries) if e.run.device == device]
    index = {e.run.run_id: i for i, e in enumerate(mine)}
    points = []
    for entry in mine:
        summary = entry.summary
        verdict = summary["verdict"]
        if summary["failed_rung"]:
            verdict += f" at {summary['failed_rung']}"
        points.append(TimelinePoint(
            run_id=entry.run.run_id, label=file_name(entry.run.solution), ok=entry.run.ok,
            verdict=verdict, time_us=summary["geomean_us"], speedup=summary["speedup"],
            pct=summary["pct_of_roofline"], parent=index.get(entry.run.parent or ""),
            timer=summary["timer"]))
    return Timeline(device=device, points=points, left_out=len(entries) - len(mine))
