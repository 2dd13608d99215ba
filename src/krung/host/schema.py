"""The JSON Schema (draft 2020-12) of a run as `Run.to_json()` writes it.

This is the contract of `krung run --json`, `krung show --json` and the MCP `evaluate` tool.
It lives next to results.py and is checked against real runs in the tests, so a field added
to `Run.to_json` without its schema fails there. Figures are open objects (a rung may add a
figure without breaking readers), but the figures readers rely on are typed.
"""

from __future__ import annotations

from typing import Any

from krung.judge.ladder import RUNGS
from krung.protocol.results import Status

SCHEMA_ID = "urn:krung:schema:run:1"

_TEXT = {"type": ["string", "null"]}
_NUMBER = {"type": ["number", "null"]}
_CASE = {"type": "string", "description": "a case as `size=value,...,dtype=name`"}

# The figures agents read, per rung; every rung may report more than these.
_FIGURES: dict[str, dict[str, Any]] = {
    "static": {
        "dsl": {"type": "string", "description": "triton, cuda, cupy, numba, torch, ..."},
        "lines": {"type": "integer", "minimum": 0},
        "sha256": {"type": "string", "description": "first 12 hex digits of the source hash"},
    },
    "compile": {
        "import_s": _NUMBER, "first_call_s": _NUMBER, "worker_start_s": _NUMBER,
        "mode": {"type": "string", "description": "how the version ran, e.g. "
                                                  "triton-interpreter"},
    },
    "run": {"case": _CASE, "outputs": {"type": "integer", "minimum": 0}, "call_ms": _NUMBER},
    "correctness": {
        "cases": {"type": "integer", "minimum": 0},
        "seeds": {"type": "integer", "minimum": 0},
        "passed": {"type": "integer", "minimum": 0, "description": "cases that passed"},
        "max_abs_err": _NUMBER, "max_rel_err": _NUMBER, "mse": _NUMBER, "rmse": _NUMBER,
        "psnr_db": {**_NUMBER, "description": "null when the outputs equal the reference"},
        "cossim": _NUMBER,
        "worst_case": _CASE,
        "failed_cases": {"type": "array", "items": _CASE},
        "first_mismatch": {"type": ["array", "null"], "items": {"type": "integer"},
                           "description": "index of the first element out of tolerance"},
        "mismatch_region": _TEXT,
        "per_case": {"type": "array", "items": {
            "type": "object", "required": ["case", "passed"],
            "properties": {"case": _CASE, "passed": {"type": "boolean"},
                           "seeds": {"type": "integer"}, "max_abs_err": _NUMBER,
                           "max_rel_err": _NUMBER, "mismatches": {"type": "integer"}}}},
    },
    "benchmark": {
        "timer": {**_TEXT, "description": "how the times were taken: a GPU timer, or "
                                          "cpu-wall (wall-clock time on a CPU)"},
        "cases": {"type": "integer", "minimum": 0},
        "geomean_us": {**_NUMBER, "description": "geometric mean of the per-case medians, µs"},
        "speedup": {**_NUMBER, "description": "geometric mean of reference time / version time"},
        "per_case": {"type": "array", "items": {
            "type": "object", "required": ["case", "median_us", "ref_median_us", "speedup"],
            "properties": {"case": _CASE, "median_us": _NUMBER, "p10_us": _NUMBER,
                           "p90_us": _NUMBER, "cv": _NUMBER, "samples": {"type": "integer"},
                           "ref_median_us": _NUMBER, "speedup": _NUMBER,
                           "sm_mhz_timed": {**_NUMBER, "description": "the SM clock the "
                                            "samples ran at (MHz, from the timer's markers)"}
                           }}},
    },
    "roofline": {
        "verdict": {"type": "string", "enum": ["at-roofline", "below", "suspect"],
                    "description": "at-roofline: every bench case reaches the threshold; "
                                   "suspect: a case is faster than the ceilings allow"},
        "pct_of_roofline": {**_NUMBER, "description": "geometric mean over the bench cases of "
                                                      "% of the binding ceiling reached"},
        "threshold_pct": _NUMBER,
        "limiter": {**_TEXT, "description": "the likely limiter of the case furthest from "
                                            "its roofline"},
        "per_case": {"type": "array", "items": {
            "type": "object", "required": ["case", "verdict"],
            "properties": {"case": _CASE, "tflops": _NUMBER, "gbps": _NUMBER,
                           "intensity": _NUMBER, "pct": _NUMBER,
                           "bound": {"type": ["string", "null"], "enum": ["memory", "compute",
                                                                         None]},
                           "verdict": {"type": ["string", "null"]}, "limiter": _TEXT}}},
    },
}


def _rung_schema() -> dict[str, Any]:
    figures_by_rung = [
        {"if": {"properties": {"name": {"const": name}}},
         "then": {"properties": {"figures": {"properties": figures}}}}
        for name, figures in _FIGURES.items()
    ]
    return {
        "type": "object",
        "description": "the outcome of one rung",
        "required": ["name", "status", "figures", "error", "error_type", "hint", "reason",
                     "location", "details", "duration_s"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "enum": list(RUNGS)},
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
        "required": ["run_id", "problem", "solution", "device", "ok", "rungs", "error",
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
            "ok": {"type": "boolean"},
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
        "$defs": {"rung": _rung_schema()},
    }
