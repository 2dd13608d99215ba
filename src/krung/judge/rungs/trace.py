"""trace: time regions inside the version's Triton kernels (krung.tracer), on a GPU.

Only on request (`--rungs ...,trace`). The version runs once with tracing on to compile its
traced kernels, then once more, traced, on its first bench case; each launch's records
become a Chrome/Perfetto trace (`artifacts/trace/launch<i>.trace.json`, one row per SM) and
per-region figures: median, p10 and p90 ns across programs, and how the regions' medians add
up against the launch's span and the call's event-timed duration.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from krung.judge.ladder import Context, RungSkipped
from krung.judge.problem import case_label
from krung.judge.rungs.spec import TABLES, Figure, RungSpec
from krung.protocol import messages

FOLDER = "artifacts/trace"
SPEC = RungSpec(
    "trace", order=100, needs=("run",), on_request=True, gpu_only=True, exclusive_gpu=True,
    checks="regions timed inside a Triton kernel instrumented with `krung.tracer`, on the "
           "first bench case: per region the time across programs, and a Chrome/Perfetto "
           "trace per launch (docs/inspect.md)",
    rows="per_region", per="region", row_label=("kernel", "region"),
    figures=(
        Figure("case", "", "the bench case traced", "text"),
        Figure("launches", "", "the launches that recorded regions", "count"),
        Figure("regions", "", "the regions, over the launches", "count"),
        Figure("call_us", "us", "the traced call's event-timed duration"),
        Figure("span_us", "us", "the longest launch's span, first record to last"),
        Figure("files", "", "the Chrome traces, in the run's folder", "list"),
        Figure("launch", "", "the launch's index in the call", "count", per_case=True),
        Figure("kernel", "", "the kernel", "text", per_case=True),
        Figure("region", "", "the region's name", "text", per_case=True, required=True),
        Figure("programs", "", "the programs that recorded it", "count", per_case=True,
               shown=TABLES),
        Figure("median_ns", "ns", "the median time of the region across programs",
               per_case=True, shown=TABLES),
        Figure("p10_ns", "ns", "its 10th percentile", per_case=True, shown=TABLES),
        Figure("p90_ns", "ns", "its 90th percentile", per_case=True, shown=TABLES),
        Figure("min_ns", "ns", "its shortest", per_case=True),
        Figure("max_ns", "ns", "its longest", per_case=True),
        Figure("launch_span_ns", "ns", "the launch's span, first record to last",
               per_case=True, shown=TABLES),
    ))


def run(ctx: Context) -> dict[str, Any]:
    if ctx.device != "cuda":
        raise RungSkipped("tracing needs a GPU: the tracer reads the GPU's %globaltimer")
    case = ctx.problem.bench_cases_for(ctx.device)[0]
    inputs = ctx.make_inputs(case, ctx.seed_for("trace"))
    reply = ctx.ask(messages.Trace(inputs=list(inputs)), f"tracing case {case_label(case)}",
                    ctx.settings.call_timeout_s)
    launches = reply["launches"]
    if not any(launch["events"] for launch in launches):
        raise RungSkipped("the version recorded no region: instrument its kernel with "
                          "krung.tracer (start/stop at region boundaries, kt.buffer(grid) "
                          "as the trace argument)")
    folder = ctx.run_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    rows, files = [], []
    for index, launch in enumerate(launches):
        if not launch["events"]:
            continue
        name = f"launch{index}.trace.json"
        (folder / name).write_text(json.dumps(chrome_trace(launch, index)))
        files.append(f"{FOLDER}/{name}")
        rows += region_rows(launch, index)
    spans = [r["launch_span_ns"] for r in rows]
    return {"case": case_label(case), "launches": len(files), "regions": len(rows),
            "call_us": reply.get("call_us"), "span_us": round(max(spans) / 1e3, 3),
            "files": files, "per_region": rows}


def region_rows(launch: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """Per region of one launch: how long it took across programs, in ns."""
    events = launch["events"]
    span = max(e[3] for e in events) - min(e[2] for e in events)
    rows = []
    for region in sorted({e[1] for e in events}):
        durations = sorted(e[3] - e[2] for e in events if e[1] == region)
        rows.append({
            "launch": index, "kernel": launch.get("kernel"),
            "region": _name(launch, region), "programs": len(durations),
            "median_ns": statistics.median(durations), "p10_ns": _quantile(durations, 0.1),
            "p90_ns": _quantile(durations, 0.9), "min_ns": durations[0],
            "max_ns": durations[-1], "launch_span_ns": span,
        })
    return rows


def chrome_trace(launch: dict[str, Any], index: int) -> dict[str, Any]:
    """The Trace Event Format (Chrome's about:tracing, Perfetto): one complete event per
    program and region, on a row per SM, in microseconds from the launch's first record."""
    origin = min(e[2] for e in launch["events"])
    label = launch.get("kernel") or f"launch {index}"
    events = [{"name": _name(launch, region), "ph": "X", "pid": label, "tid": f"SM {sm}",
               "ts": (begin - origin) / 1e3, "dur": (end - begin) / 1e3,
               "args": {"program": program}}
              for program, region, begin, end, sm in launch["events"]]
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"grid": launch["grid"], "clock": "%globaltimer (ns)"}}


def _name(launch: dict[str, Any], region: int) -> str:
    names = launch.get("regions") or []
    return names[region] if region < len(names) else f"region {region}"


def _quantile(ordered: list[int], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
