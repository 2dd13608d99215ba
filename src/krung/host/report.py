"""Runs as text for people and agents: rung lines, per-case tables, history, and the short
verdict an agent acts on (`agent_summary`).

Plain strings and rich tables only; the CLI decides where they go. JSON is Run.to_json.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from krung.host.next_step import Turn, next_line
from krung.judge.device import SLOW_CLOCK
from krung.judge.ladder import specs
from krung.judge.rungs.spec import AGENT, TABLE
from krung.protocol.results import Run, RungResult, Status, format_value
from krung.protocol.unchecked import describe

if TYPE_CHECKING:  # rich is imported where a table is drawn: the API stays light to import
    from rich.table import Table

    from krung.host.history_tree import Entry

DETAIL_LINES = 24


def device_notice(env: dict[str, Any]) -> str:
    if env.get("device") == "cpu":
        return ("device: cpu (no GPU in use): Triton kernels run under Triton's interpreter on "
                "CPU tensors, and timings are CPU wall-clock time, not GPU time")
    name = env.get("device_name", "cuda")
    extra = ", ".join(f"{k} {env[k]}" for k in ("driver", "torch", "triton") if env.get(k))
    return f"device: {name} ({extra})" if extra else f"device: {name}"


def rung_block(result: RungResult) -> list[str]:
    """The rung's line, and for a failure where it happened, the hint and the details."""
    lines = [result.line()]
    if result.status is Status.FAILED:
        if result.hint:
            lines.append(f"    hint: {result.hint}")
        if result.details:
            detail = result.details.rstrip().splitlines()
            if len(detail) > DETAIL_LINES:
                detail = ["...", *detail[-DETAIL_LINES:]]
            lines += [f"    | {line}" for line in detail]
    return lines


def verdict(run: Run) -> str:
    if run.interrupted:
        return f"STOPPED (no verdict)  run {run.run_id}: {run.error}"
    if run.error:
        return f"ERROR (krung failed, not your version)  run {run.run_id}: {run.error}"
    failed = [r.name for r in run.rungs if r.status is Status.FAILED]
    if failed:
        return f"FAILED  run {run.run_id}: {', '.join(failed)} failed"
    passed = "every rung passed"
    if run.skipped:
        names = ", ".join(r.name for r in run.skipped)
        passed = (f"every rung that could run passed ({names} skipped)"
                  + _UNCHECKED * _correctness_unchecked(run))
    paths = run.unchecked_paths
    if paths:
        return (f"OK with unchecked paths  run {run.run_id}: {passed}; never checked: "
                + describe(paths))
    return f"OK  run {run.run_id}: {passed}"


_UNCHECKED = "; correctness NOT checked"


def _correctness_unchecked(run: Run) -> bool:
    """The ladder had the correctness rung, and it could not run (no GPU for CUDA C++...)."""
    correctness = run.rung("correctness")
    return correctness is not None and correctness.status is Status.SKIPPED


def case_table(result: RungResult) -> Table | None:
    """A rung's table (per case, per kernel, per region) as its declaration shows it: the
    figures it marks for the table, in declared order, those no row has left out."""
    spec = specs().get(result.name)
    rows = result.figures.get(spec.rows) if spec is not None else None
    if not rows or not isinstance(rows, list):
        return None
    from rich.table import Table

    columns = [f for f in spec.shown(TABLE, per_case=True) if any(f.name in r for r in rows)]
    table = Table(title=spec.table_title, title_justify="left", box=None,
                  header_style="bold", pad_edge=False)
    table.add_column(spec.per)
    for figure in columns:
        table.add_column(figure.header, justify="left" if figure.kind in ("text", "list", "map")
                         else "right")
    for row in rows:
        table.add_row(spec.row_name(row), *(format_value(row.get(f.name)) for f in columns))
    return table


def history_table(entries: list[Entry], title: str) -> Table:
    """Runs with their verdict, time, speedup, % of the roofline, and change from the
    parent (krung.history)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=None, header_style="bold",
                  pad_edge=False)
    for column in ("run", "started", "version", "verdict", "time (geomean)", "speedup",
                   "roofline", "parent", "vs parent", "device"):
        table.add_column(column, justify="right" if column in ("speedup", "roofline",
                                                               "vs parent") else "left")
    for entry in entries:
        run, summary = entry.run, entry.summary
        verdict_text = summary["verdict"]
        if summary["failed_rung"]:
            verdict_text += f" ({summary['failed_rung']})"
        time_text = "-"
        if summary["geomean_us"] is not None:
            time_text = f"{format_value(summary['geomean_us'])} us"
            if summary["timer"] == "cpu-wall":
                time_text += " cpu"
        speedup = summary["speedup"]
        table.add_row(run.run_id, run.started_at.replace("T", " ")[:19],
                      run.solution.rsplit("/", 1)[-1], verdict_text, time_text,
                      f"{speedup:.3g}x" if speedup else "-", roofline_text(summary),
                      run.parent or "-", change_text(entry.time_change), run.device)
    return table


def roofline_text(summary: dict[str, Any]) -> str:
    """`72% below`, `95% at`, `131% suspect`, or `-`."""
    pct = summary.get("pct_of_roofline")
    if pct is None:
        return "-"
    word = {"at-roofline": "at", "below": "below", "suspect": "suspect"}.get(
        summary.get("roofline_verdict") or "", "")
    return f"{pct:.0f}% {word}".rstrip()


def change_text(change: float | None) -> str:
    """A time change from the parent: `-18.7%` (faster) or `+4.2%` (slower), or `-`."""
    return "-" if change is None else f"{100 * change:+.1f}%"


# The agent's verdict: short, plain (no colours, no tables), in the order an agent acts on it.
AGENT_MAX_LINES = 40
AGENT_LINE_CHARS = 500  # room for a whole error message; tracebacks rarely reach it
AGENT_DETAIL_LINES = 10
AGENT_CASES = 8


def agent_rung_line(result: RungResult) -> str:
    """The line `--format agent` prints as each rung finishes, so a run stopped mid-way has
    shown every rung it finished; the summary follows the last, after a blank line."""
    return _clip(result.line())


def agent_report(run: Run, turn: Turn | None = None) -> str:
    """What `krung run --format agent` printed, rebuilt from a recorded run (`krung show`)."""
    return "\n".join([*(agent_rung_line(r) for r in run.rungs), "", agent_summary(run, turn=turn)])


def agent_summary(run: Run, max_lines: int = AGENT_MAX_LINES, turn: Turn | None = None) -> str:
    """A plain-text verdict of at most `max_lines` lines: the first failing rung, its error,
    where in the version (with the source line) and the hint; the paths never checked; the
    figures that matter; and the command to run next, with the options of `turn` (the
    command that printed it; by default the run's own problem, version, rungs and device)."""
    failed = next((r for r in run.rungs if r.status is Status.FAILED), None)
    head = [_agent_verdict(run, failed), "rungs: " + ", ".join(_rung_state(r) for r in run.rungs)]
    if run.unchecked_paths and failed is None and not run.error:
        head.append("unchecked paths: " + describe(run.unchecked_paths))
    body: list[str] = []
    if run.error:
        head.append(f"error: {run.error.strip().splitlines()[0]}")
        body += _indented(run.error.strip().splitlines()[1:])
    if failed is not None:
        head += _failure_lines(run, failed)
        body += _indented((failed.details or "").rstrip().splitlines())
    for rung in run.rungs:  # a rung's own summary, or the figures it declares for agents
        body += _AGENT_LINES.get(rung.name, _declared_lines)(rung)
    tail = [next_line(run, failed, turn)]
    room = max(max_lines - len(head) - len(tail), 0)
    if len(body) > room:
        body = [*body[:max(room - 1, 0)], f"... ({len(body) - room + 1} more lines cut)"]
    lines = [*head, *body, *tail][:max_lines]
    return "\n".join(_clip(line) for line in lines)


def _agent_verdict(run: Run, failed: RungResult | None) -> str:
    where = f"run {run.run_id}  problem {run.problem}  version {_file_name(run.solution)}  " \
            f"device {run.device}" + "  (not graded)" * (run.env.get("graded") is False)
    if run.interrupted:
        return f"STOPPED (no verdict)  {where}"
    if run.error:
        return f"ERROR (krung failed, not your version)  {where}"
    if failed is not None:
        return f"FAILED at {failed.name}  {where}"
    if not run.ok:
        return f"INCOMPLETE (no rung ran to the end)  {where}"
    ok = "OK with unchecked paths" if run.unchecked_paths else "OK"
    if run.skipped:
        names = ", ".join(r.name for r in run.skipped)
        return (f"{ok} (every rung that could run passed; {names} skipped"
                f"{_UNCHECKED * _correctness_unchecked(run)})  {where}")
    return f"{ok} (every rung passed)  {where}"


def _rung_state(result: RungResult) -> str:
    if result.status is Status.SKIPPED:
        return f"{result.name} skipped ({result.reason})"
    if result.ok and result.figures.get("first_call"):  # compile: it imports, the call raised
        return f"{result.name} ok (but its first call {result.figures['first_call']})"
    return f"{result.name} {'ok' if result.ok else 'FAILED'}"


def _failure_lines(run: Run, failed: RungResult) -> list[str]:
    lines = [f"error: {failed.error}"]
    if failed.location:
        lines.append(f"where: {failed.location}")
        number, code = _source_line(run, failed.location)
        if code and code not in (failed.details or ""):  # details often show it already
            lines.append(f"  {number} | {code}")
    if failed.hint:
        lines.append(f"hint: {failed.hint}")
    cases = failed.figures.get("failed_cases")
    if cases:
        total = failed.figures.get("cases", "?")
        shown = "; ".join(cases[:AGENT_CASES]) + (" ..." if len(cases) > AGENT_CASES else "")
        lines.append(f"failing cases ({len(cases)} of {total}): {shown}")
    return lines


def _source_line(run: Run, location: str) -> tuple[str, str | None]:
    """The number and the text of the version's line that `location` (file:line) names."""
    file, _, number = location.rpartition(":")
    if not number.isdigit() or _file_name(file) != _file_name(run.solution):
        return number, None
    lines = run.source.splitlines()
    index = int(number) - 1
    return number, (lines[index].strip() or None) if 0 <= index < len(lines) else None


def _listed_and_unseen(figures: dict[str, Any]) -> str:
    """`4 listed + 2 unseen, 3 seeds each`: the problem's own cases and those krung derived,
    then `; 5 value stresses, 1 seed` (krung.judge.problem.value_stress) and on a CPU `; 1
    bench shape, 1 seed` (a bench case's path, checked once)."""
    rows = figures.get("per_case") or []
    unseen = figures.get("unseen_cases") or 0
    bench = sum(" (bench " in str(row.get("case")) for row in rows)
    stressed = sum("stress" in row for row in rows)
    text = (f"{(figures.get('cases') or 0) - unseen - bench - stressed} listed + {unseen} "
            f"unseen, {figures.get('seeds')} seeds each")
    text += f"; {stressed} value stress(es), 1 seed" if stressed else ""
    return text + (f"; {bench} bench shape(s), 1 seed" if bench else "")


def _correctness_lines(rung: RungResult | None) -> list[str]:
    if rung is None or rung.status is Status.SKIPPED or "cases" not in rung.figures:
        return []
    f = rung.figures
    text = (f"correctness: {f.get('passed')}/{f.get('cases')} cases passed "
            f"({_listed_and_unseen(f)}); "
            f"max_abs_err {format_value(f.get('max_abs_err'))}"
            f" max_rel_err {format_value(f.get('max_rel_err'))}")
    if f.get("worst_case"):
        text += f" (worst {f['worst_case']})"
    if f.get("psnr_db") is not None:
        text += f"; psnr {format_value(f['psnr_db'])} dB"
    if f.get("cossim") is not None:
        text += f"; cossim {format_value(f['cossim'])}"
    if "delegated" in f:  # krung.judge.delegation
        own = ", ".join(f.get("own_kernels") or [])
        text += ("; delegated (no kernel of its own, only torch's operators)" if f["delegated"]
                 else f"; own kernels: {own}" if own else "")
    return [text, *_declared_lines(rung)]  # and its warnings (caught errors, ghost kernels)


def _artifact_lines(rung: RungResult | None) -> list[str]:
    """One line per compiled kernel: resources, occupancy and the instruction highlights."""
    if rung is None or rung.status is Status.SKIPPED:
        return []
    rows = [r for r in rung.figures.get("per_kernel") or [] if not r.get("error")]
    if not rows:
        return []
    lines = [f"artifacts ({rung.figures.get('source')}; `krung artifacts RUN --kind sass`):"]
    for row in rows[:AGENT_CASES]:
        name = row["kernel"] if row.get("function") in (None, row["kernel"]) else \
            f"{row['kernel']}:{row['function']}"
        occupancy = (f", occupancy {format_value(row['occupancy'])} ({row.get('limited_by')})"
                     if row.get("occupancy") is not None else "")
        spills = ", SPILLS" if row.get("spills") else ""
        lines.append(f"  {name} [{row.get('specialisation')}]: {row.get('registers')} regs, "
                     f"smem {row.get('static_smem_bytes', 0) + (row.get('dynamic_smem_bytes') or 0)}"
                     f" B{occupancy}{spills}; {row.get('highlights') or '-'}")
    if len(rows) > AGENT_CASES:
        lines.append(f"  ... {len(rows) - AGENT_CASES} more kernel(s)")
    return lines


def _profile_lines(rung: RungResult | None) -> list[str]:
    """Per profiled kernel: time, throughput, DRAM traffic, occupancy, stalls, findings."""
    if rung is None or not rung.ok:
        return []
    lines = []
    for row in (rung.figures.get("per_kernel") or [])[:AGENT_CASES]:
        stalls = ", ".join(s["reason"] for s in row.get("top_stalls") or [])
        lines.append(
            f"profile {row.get('kernel')}: {format_value((row.get('duration_ns') or 0) / 1e3)} us"
            f", compute {format_value(row.get('compute_pct'))}%, memory "
            f"{format_value(row.get('memory_pct'))}% of peak, DRAM read "
            f"{format_value(row.get('dram_read_bytes'))} B write "
            f"{format_value(row.get('dram_write_bytes'))} B, occupancy "
            f"{format_value(row.get('achieved_occupancy_pct'))}% of "
            f"{format_value(row.get('theoretical_occupancy_pct'))}%; stalls: {stalls or '-'}")
        lines += [f"  {finding}" for finding in (row.get("findings") or [])[:3]]
    return lines


def _slow_clock(row: dict) -> str:
    """The clock a case's samples ran at, where it was well under the top clock: a
    compute-bound time measured then is longer by as much."""
    timed, top = row.get("sm_mhz_timed"), row.get("sm_max_mhz")
    if not timed or not top or timed >= SLOW_CLOCK * top:
        return ""
    return f"; timed at {timed} MHz, {1 - timed / top:.0%} under the top clock"


NOISY_CI_PCT = 5.0  # a median known only to +-5% or worse cannot rank close versions


def _noisy(row: dict[str, Any]) -> str:
    ci = row.get("ci_pct")
    if ci is None or ci < NOISY_CI_PCT:
        return ""
    return (f"; noisy: the median is known to +-{format_value(ci)}%, so differences below "
            "that say nothing")


def _benchmark_lines(rung: RungResult | None) -> list[str]:
    if rung is None or not rung.ok:
        return []
    f = rung.figures
    timer = f.get("timer")
    clock = f"{timer}: CPU wall-clock, not GPU time" if timer == "cpu-wall" else timer
    lines = [f"benchmark ({clock}): geomean {format_value(f.get('geomean_us'))} us, "
             f"speedup {format_value(f.get('speedup'))}x vs the reference (>1 is faster)"]
    rows = f.get("per_case") or []
    for row in rows[:AGENT_CASES]:
        lines.append(f"  {row.get('case')}: {format_value(row.get('median_us'))} us "
                     f"(p10 {format_value(row.get('p10_us'))}, p90 "
                     f"{format_value(row.get('p90_us'))}), reference "
                     f"{format_value(row.get('ref_median_us'))} us, speedup "
                     f"{format_value(row.get('speedup'))}x"
                     + (f"; torch.compile {format_value(row['compiled_median_us'])} us, "
                        f"speedup {format_value(row.get('speedup_vs_compiled'))}x"
                        if "compiled_median_us" in row else "")
                     + (f"; autotuned {row['config']}" if row.get("config") else "")
                     + _noisy(row) + _slow_clock(row))
    if len(rows) > AGENT_CASES:
        lines.append(f"  ... {len(rows) - AGENT_CASES} more case(s)")
    if f.get("compiled_error"):
        lines.append(f"  torch.compile(reference) not timed: {f['compiled_error']}")
    elif "speedup_vs_compiled" in f:
        lines.append(f"  speedup {format_value(f['speedup_vs_compiled'])}x vs "
                     f"torch.compile(reference) (its compiles, "
                     f"{format_value(f.get('compiled_warm_up_s'))} s, not timed)")
    return lines


def _roofline_lines(rung: RungResult | None) -> list[str]:
    if rung is None or "pct_of_roofline" not in rung.figures:
        return []
    f = rung.figures
    lines = [f"roofline: {f.get('verdict')}, {format_value(f.get('pct_of_roofline'))}% of the "
             f"binding ceiling (geomean), {f.get('at_roofline')} case(s) at >= "
             f"{format_value(f.get('threshold_pct'))}%; ceilings {f.get('ceilings_from')}"]
    for row in (f.get("per_case") or [])[:AGENT_CASES]:
        if row.get("verdict"):
            ceiling = row.get("ceiling_label", row["ceiling"])
            lines.append(f"  {row['case']}: {format_value(row.get('pct'))}% of {ceiling}"
                         f" ({row['bound']}-bound, {format_value(row.get('tflops'))} TFLOP/s, "
                         f"{format_value(row.get('gbps'))} GB/s), {row['verdict']}")
    return lines


def _declared_lines(rung: RungResult) -> list[str]:
    """A rung's figures that its declaration shows agents (AGENT): one line of its own
    figures, one per row of its table."""
    spec = specs().get(rung.name)
    if spec is None or rung.status is Status.SKIPPED:
        return []
    own = [f for f in spec.shown(AGENT, per_case=False) if f.name in rung.figures]
    lines = [f"{rung.name}: " + ", ".join(
        f"{f.name} {_with_unit(rung.figures[f.name], f.unit)}" for f in own)] if own else []
    rows = rung.figures.get(spec.rows) if spec.columns else None
    columns = spec.shown(AGENT, per_case=True)
    for row in (rows if isinstance(rows, list) and columns else [])[:AGENT_CASES]:
        lines.append(f"  {spec.row_name(row)}: " + ", ".join(
            f"{f.name} {_with_unit(row[f.name], f.unit)}" for f in columns if f.name in row))
    return lines


def _with_unit(value: Any, unit: str) -> str:
    return f"{format_value(value)} {unit}" if unit and value is not None else format_value(value)


# The rungs whose agent summary is written out here; the others show what they declare.
_AGENT_LINES = {"correctness": _correctness_lines, "benchmark": _benchmark_lines,
                "artifacts": _artifact_lines, "profile": _profile_lines,
                "roofline": _roofline_lines}


def _indented(lines: list[str]) -> list[str]:
    if len(lines) > AGENT_DETAIL_LINES:
        lines = [*lines[:AGENT_DETAIL_LINES], f"... ({len(lines) - AGENT_DETAIL_LINES} more)"]
    return [f"  | {line}" for line in lines]


def _clip(line: str) -> str:
    return line if len(line) <= AGENT_LINE_CHARS else line[:AGENT_LINE_CHARS - 3] + "..."


def _file_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]
