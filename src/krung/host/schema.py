"""The JSON Schema (draft 2020-12) of a run as `Run.to_json()` writes it.

This is the contract of `krung run --json`, `krung show --json` and the MCP `evaluate` tool.
It is checked against real runs in the tests, so a field added to `Run.to_json` without its
schema fails there. Each rung's figures are typed and described from its declaration
(krung.judge.rungs.spec); figures stay open objects, so a reader of an older schema still
reads a run whose rung reports a new figure.
"""

from __future__ import annotations

from typing import Any

from krung.judge.ladder import specs
from krung.judge.rungs.spec import Figure, RungSpec
from krung.protocol.results import Status

SCHEMA_ID = "urn:krung:schema:run:1"

_TEXT = {"type": ["string", "null"]}
# A figure's kind as JSON Schema: null is allowed for every kind (NaN and infinity are written
# as null; a figure may be unknown).
_KINDS: dict[str, dict[str, Any]] = {
    "number": {"type": ["number", "null"]},
    "count": {"type": ["integer", "null"], "minimum": 0},
    "text": _TEXT,
    "flag": {"type": ["boolean", "null"]},
    "list": {"type": ["array", "null"]},
    "map": {"type": ["object", "null"]},
}


def figure_schema(figure: Figure) -> dict[str, Any]:
    """One figure, typed and described (with its unit) from its declaration."""
    found = {**_KINDS[figure.kind], "description": figure.described()}
    if figure.choices:
        found["enum"] = [*figure.choices, None]
    return found


def figures_schema(spec: RungSpec) -> dict[str, Any]:
    """The figures of one rung: its own, and the rows of its table."""
    properties = {f.name: figure_schema(f) for f in spec.summary}
    if spec.columns:
        properties[spec.rows] = {
            "type": "array", "description": f"one row per {spec.per}",
            "items": {"type": "object",
                      "required": [f.name for f in spec.columns if f.required],
                      "properties": {f.name: figure_schema(f) for f in spec.columns}}}
    return {"type": "object", "description": spec.checks, "properties": properties}


def _rung_schema() -> dict[str, Any]:
    declared = specs()
    figures_by_rung = [
        {"if": {"properties": {"name": {"const": name}}},
         "then": {"properties": {"figures": figures_schema(spec)}}}
        for name, spec in declared.items()
    ]
    return {
        "type": "object",
        "description": "the outcome of one rung",
        "required": ["name", "status", "figures", "error", "error_type", "hint", "reason",
                     "location", "details", "duration_s"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "enum": list(declared)},
            "status": {"type": "string", "enum": [s.value for s in Status]},
            "figures": {"type": "object"},
            "error": {**_TEXT, "description": "`Type: message` when the rung failed"},
            "error_type": {**_TEXT, "description": "Mismatch, CompileError, Timeout, "
                                                   "WorkerCrashed, the version's own "
                                                   "exception type, ..."},
            "hint": {**_TEXT, "description": "what to do about the failure"},
            "reason": {**_TEXT, "description": "why the rung was skipped"},
            "location": {**_TEXT, "description": "file:line in the version, where known"},
            "details": {**_TEXT, "description": "source excerpt with a caret, log tail, ..."},
            "duration_s": {"type": "number", "minimum": 0},
        },
        "allOf": [
            {"if": {"properties": {"status": {"const": "failed"}}},
             "then": {"properties": {"error": {"type": "string"},
                                     "error_type": {"type": "string"}}}},
            {"if": {"properties": {"status": {"const": "skipped"}}},
             "then": {"properties": {"reason": {"type": "string"}}}},
            *figures_by_rung,
        ],
    }


_UNCHECKED_PATH = {
    "type": "object", "required": ["case", "path", "why", "rung"],
    "additionalProperties": False,
    "properties": {
        "case": {"type": "string", "description": "the bench case (`size=value,...`)"},
        "path": {"type": "string", "description": "what was never checked: the case's shape, "
                                                  "or a kernel's specialisation"},
        "why": {"type": "string"},
        "rung": {"enum": ["correctness", "artifacts"], "description": "the rung that found it"},
        "cost_s": {"type": "number", "description": "what the shape's smallest affordable "
                                                    "form would have cost on this CPU"},
    },
}


def run_schema() -> dict[str, Any]:
    """The JSON Schema of `Run.to_json()` (with or without the source)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "krung run",
        "description": "One evaluation of one version of a problem on one device: the rungs "
                       "it climbed, in order, with their figures. `ok` is true when no "
                       "rung failed or was skipped and the evaluation itself did not break.",
        "type": "object",
        "required": ["run_id", "problem", "solution", "device", "outcome", "ok", "unchecked_paths",
                     "rungs", "error",
                     "problem_path", "source_sha256", "seed", "env", "started_at",
                     "finished_at", "parent"],
        "additionalProperties": False,
        "properties": {
            "run_id": {"type": "string", "pattern": "^[0-9a-f]+$"},
            "problem": {"type": "string", "description": "the problem directory's name"},
            "problem_path": {"type": "string"},
            "solution": {"type": "string", "description": "path of the version file"},
            "source_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "device": {"type": "string", "description": "cpu, or the GPU's name"},
            "outcome": {"enum": ["passed", "failed", "error"],
                        "description": "passed or failed: the verdict on the version; error: "
                                       "no verdict on the version: krung itself failed "
                                       "(twice: the judge died, fell silent or raised), or "
                                       "the run was interrupted (exit 130; `error` says "
                                       "where)"},
            "ok": {"type": "boolean"},
            "unchecked_paths": {
                "type": "array", "items": {"$ref": "#/$defs/unchecked_path"},
                "description": "code paths a bench case takes that no check ran (on a CPU: "
                               "a bench shape the interpreter could not afford, or a Triton "
                               "specialisation only bench cases launch): the version passed "
                               "without them; empty when every path was checked"},
            "rungs": {"type": "array", "items": {"$ref": "#/$defs/rung"}},
            "error": {**_TEXT, "description": "the evaluation itself broke (the judge "
                                              "died, or the run was interrupted)"},
            "seed": {"type": "integer", "minimum": 0,
                     "description": "the evaluation seed; `krung run --seed` reproduces it"},
            "env": {"type": "object", "description": "what could change a figure: device, "
                                                     "driver, library versions"},
            "started_at": {"type": "string", "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
            "source": {"type": "string", "description": "the version's source (only when "
                                                        "asked for)"},
            "parent": {"type": ["string", "null"], "pattern": "^[0-9a-f]+$",
                       "description": "the run this version builds on: named with --parent, "
                                      "or else the previous run of the same version file"},
        },
        "$defs": {"rung": _rung_schema(), "unchecked_path": _UNCHECKED_PATH},
    }
