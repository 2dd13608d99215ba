"""A rung's declaration: its name, its place in the ladder, what it needs and checks, and every
figure it reports, with the figure's unit, meaning and where reports show it.

Each rung module (or package) under krung.judge.rungs declares `SPEC = RungSpec(...)` beside
its `run(ctx)`. The ladder finds the rungs by these declarations (krung.judge.ladder); the
JSON Schema (krung.host.schema), the text and agent reports (krung.host.report), the HTML
report (krung.host.html_report) and docs/rungs.md are made from them. Stdlib only: the host
reads every declaration without torch, so rung modules keep their heavy imports inside the
functions that need them.

`python -m krung.judge.rungs.spec --markdown > docs/rungs.md` writes the rung reference.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# What a figure's value is; the JSON Schema types them (null is always allowed: a float that is
# NaN or infinite is written as null, and a figure may be unknown).
KINDS = ("number", "count", "text", "flag", "list", "map")

# Where reports show a figure. A rung's one-line result shows every scalar figure; these say
# where else.
TABLE = "table"  # a column of the per-case table of `krung run` and `krung show` (text)
HTML = "html"  # a column of the HTML report's table (per case), or of its summary table
NOTE = "note"  # the HTML report, under the table: one line per case (too long for a column)
AGENT = "agent"  # the agent format's summary, for rungs without a summary of their own
PLACES = (TABLE, HTML, NOTE, AGENT)
TABLES = (TABLE, HTML)

# Units that a figure's name already says (`median_us`, `ci_pct`, `tflops`): no unit in its header.
_NAME_SAYS = {"us": ("_us",), "ns": ("_ns",), "ms": ("_ms",), "s": ("_s",), "%": ("_pct", "pct"),
              "B": ("_bytes",), "MHz": ("_mhz",), "dB": ("_db",), "TFLOP/s": ("tflops",),
              "GB/s": ("gbps",)}


@dataclass(frozen=True)
class Figure:
    """One figure a rung reports: `name` in its figures (or in each row of its table, with
    `per_case`), `unit` (us, s, %, B, MHz, x, ... or "" for none), what it means, its kind
    (KINDS), where reports show it (PLACES), and when it is there if not always."""

    name: str
    unit: str
    meaning: str
    kind: str = "number"
    per_case: bool = False
    shown: tuple[str, ...] = ()
    when: str = ""  # e.g. "on failure", "with --vs-compiled"; empty: whenever the rung reports
    required: bool = False  # in every row of the table (per_case figures only)
    choices: tuple[str, ...] = ()  # the values a text figure takes, where they are few

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"figure {self.name}: kind {self.kind!r} is not one of {KINDS}")
        unknown = set(self.shown) - set(PLACES)
        if unknown:
            raise ValueError(f"figure {self.name}: shown in {sorted(unknown)}, not in {PLACES}")

    @property
    def header(self) -> str:
        """The column header: the name, and the unit where the name does not say it."""
        if not self.unit or self.name.endswith(_NAME_SAYS.get(self.unit, ())):
            return self.name
        return f"{self.name} ({self.unit})"

    def described(self) -> str:
        """The meaning with its unit and condition, for the schema and the docs."""
        text = self.meaning + (f" ({self.unit})" if self.unit else "")
        return text + (f"; {self.when}" if self.when else "")


@dataclass(frozen=True)
class RungSpec:
    """A rung: its name, its place in the ladder (`order`: lower runs first), the rungs it
    needs (it is skipped when one of them failed or was skipped), what it checks (a
    sentence), and its figures. Its per-case table is the list figure `rows`, one row `per`
    case (bench case, kernel, region), each labelled by the figures in `row_label`."""

    name: str
    order: float
    checks: str
    needs: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()
    on_request: bool = False  # not in the default ladder: `--rungs +name` adds it
    gpu_only: bool = False  # skipped where there is no GPU
    exclusive_gpu: bool = False  # it times or profiles: it waits for the GPU to itself
    rows: str = "per_case"
    per: str = "case"
    row_label: tuple[str, ...] = ("case",)
    summary_title: str = "figures"  # the HTML report's title of its summary table
    notes: str = ""  # more for docs/rungs.md, under the rung's figures

    def __post_init__(self) -> None:
        names = [(f.name, f.per_case) for f in self.figures]
        twice = sorted({n for n, p in names if names.count((n, p)) > 1})
        if twice:
            raise ValueError(f"rung {self.name} declares {', '.join(twice)} twice")

    @property
    def summary(self) -> tuple[Figure, ...]:
        """The figures of the rung as a whole."""
        return tuple(f for f in self.figures if not f.per_case)

    @property
    def columns(self) -> tuple[Figure, ...]:
        """The figures of each row of its table."""
        return tuple(f for f in self.figures if f.per_case)

    @property
    def table_title(self) -> str:
        return f"{self.name} per {self.per}"

    def shown(self, place: str, *, per_case: bool) -> list[Figure]:
        """The figures shown in `place`, in declared order."""
        return [f for f in self.figures if f.per_case == per_case and place in f.shown]

    def row_name(self, row: dict[str, Any]) -> str:
        """A row's label: its `row_label` figures, joined."""
        return " ".join(str(row[k]) for k in self.row_label if row.get(k) not in (None, ""))

    def undeclared(self, figures: dict[str, Any], failed: bool = False) -> list[str]:
        """The figures (`name`, or `rows[].name`) a result holds that this declaration does
        not: what a report could not show or type. A failed rung's figures may be the row
        of the case that failed (the benchmark's ImpossibleTime)."""
        summary = {f.name for f in self.summary}
        columns = {f.name for f in self.columns}
        found = [k for k in figures if k not in summary and k != self.rows
                 and not (failed and k in columns)]
        rows = figures.get(self.rows)
        if isinstance(rows, list):
            keys = dict.fromkeys(k for row in rows if isinstance(row, dict) for k in row)
            found += [f"{self.rows}[].{k}" for k in keys if k not in columns]
        return found


def markdown(specs: Iterable[RungSpec]) -> str:
    """docs/rungs.md: the ladder, then each rung with its figures."""
    specs = list(specs)
    default = [s.name for s in specs if not s.on_request]
    lines = [
        "# Rungs and their figures",
        "",
        "<!-- Generated from the rungs' declarations (`SPEC` in each module under "
        "src/krung/judge/rungs/):",
        "     python -m krung.judge.rungs.spec --markdown > docs/rungs.md -->",
        "",
        "Each rung prints one line as it finishes: `[name] ok  key=value ...` (its scalar "
        "figures), `[name] FAILED  Type: message (file:line)` followed by `hint:` and the "
        "details, or `[name] skipped  reason`. A rung that needs a rung that failed (or was "
        "skipped) is skipped, with that reason. A rung the machine cannot run (GPU only, "
        "without a GPU) is skipped too; skipped rungs do not fail a run (`ok` means no rung "
        "failed; exit status 0).",
        "",
        f"The default ladder: {' → '.join(default)}. On request (`--rungs +name` adds one "
        "to the default ladder; naming rungs climbs exactly those, in ladder order): "
        f"{', '.join(s.name for s in specs if s.on_request) or 'none'}.",
        "",
        "| rung | order | needs | checks |",
        "| --- | --- | --- | --- |",
    ]
    for spec in specs:
        marks = [m for m, on in (("GPU only", spec.gpu_only), ("on request", spec.on_request))
                 if on]
        lines.append(f"| [`{spec.name}`](#{spec.name}) | {spec.order:g} | "
                     f"{', '.join(f'`{n}`' for n in spec.needs) or '-'} | "
                     f"{'; '.join(marks) + ': ' if marks else ''}{_cell(spec.checks)} |")
    lines += ["", "A figure's unit is in its name where the name ends in one (`_us`, `_pct`, "
              "`_bytes`, ...); tables show it in the column header otherwise. Figures may be "
              "null: a NaN or infinite value is written as null, and some figures are unknown "
              "on some machines.", ""]
    for spec in specs:
        lines += [f"## {spec.name}", "", spec.checks[:1].upper() + spec.checks[1:] + ".", ""]
        lines += _figure_table(spec.summary)
        if spec.columns:
            lines += [f"Per {spec.per} (`{spec.rows}`, a row each):", ""]
            lines += _figure_table(spec.columns)
        if spec.notes:
            lines += [spec.notes.strip(), ""]
    return "\n".join([*lines, _OWN_RUNG]).rstrip() + "\n"


_OWN_RUNG = '''## A rung of your own

One file: a module that declares `SPEC` and `run(ctx)`, named in `KRUNG_EXTRA_RUNGS` (modules
separated by commas) and importable on `PYTHONPATH` (the judge process imports it too). It
joins the ladder at its `order`; `--rungs +name` climbs it with the default ladder. Its
figures appear in the JSON and its schema (`krung schema`), in the text and agent output, and
in the HTML report, as its declaration says (`shown`: `table`, `html`, `note`, `agent`).

```python
"""lines: how long the version is (a toy)."""
from krung.judge.rungs.spec import AGENT, Figure, RungSpec

SPEC = RungSpec("lines", order=15, needs=("static",), on_request=True,
                checks="the version's file has at most 200 lines",
                figures=(Figure("source_lines", "", "lines in the file", "count",
                                shown=(AGENT,)),))


def run(ctx):
    count = len(ctx.solution.source.splitlines())
    if count > 200:
        from krung.protocol.errors import RungFailed

        raise RungFailed("TooLong", f"{count} lines", "split the file",
                         figures={"source_lines": count})
    return {"source_lines": count}
```

`KRUNG_EXTRA_RUNGS=lines PYTHONPATH=folder/of/lines krung run PROBLEM VERSION --rungs +lines`
'''


def _figure_table(figures: Iterable[Figure]) -> list[str]:
    rows = [f"| `{f.name}` | {f.unit or '-'} | {f.kind} | {_cell(f.meaning)}"
            f"{' (' + ', '.join(f'`{c}`' for c in f.choices) + ')' if f.choices else ''} | "
            f"{_cell(f.when) or 'always'} |" for f in figures]
    if not rows:
        return []
    return ["| figure | unit | kind | meaning | when |", "| --- | --- | --- | --- | --- |",
            *rows, ""]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m krung.judge.rungs.spec",
                                     description="the rungs' declarations, as docs/rungs.md")
    parser.add_argument("--markdown", action="store_true", required=True)
    parser.parse_args(argv)
    from krung.judge.ladder import specs

    sys.stdout.write(markdown(specs().values()))


if __name__ == "__main__":
    main()
