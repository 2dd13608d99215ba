"""`krung schema`: the JSON Schema of a run, checked against real `krung run --json` output."""

from __future__ import annotations

import json

import pytest

from tests.conftest import GOOD, TAIL_BUG

jsonschema = pytest.importorskip("jsonschema", reason="a test dependency (the dev extra)")



@pytest.fixture
def validator(krung):
    printed = krung("schema")
    assert printed.code == 0, printed.stderr
    schema = printed.json()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def errors(validator, instance) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(instance)]


def test_real_runs_validate(validator, shared_runs):
    passing = shared_runs.run("good", GOOD)
    failing = shared_runs.run("tail", TAIL_BUG)
    assert (passing.code, failing.code) == (0, 1), passing.stderr + failing.stderr
    for result in (passing, failing):
        assert errors(validator, result.json()) == []
    run_id = passing.json()["run_id"]
    shown = shared_runs.krung("show", run_id, "--json", "--source")
    assert shown.json()["source"].strip() == GOOD.strip()
    assert errors(validator, shown.json()) == []

    # The schema says something: drift from Run.to_json is caught.
    run = failing.json()
    correctness = next(r for r in run["rungs"] if r["name"] == "correctness")
    for broken, words in [
        ({**run, "verdict": "ok"}, "Additional properties"),
        ({**run, "rungs": [{**correctness, "status": "passed"}]}, "is not one of"),
        ({**run, "rungs": [{**correctness, "error": None}]}, "None is not of type 'string'"),
        ({**run, "rungs": [{**correctness, "figures": {"max_abs_err": "big"}}]},
         "'big' is not of type"),
        ({k: v for k, v in run.items() if k != "seed"}, "'seed' is a required property"),
    ]:
        found = errors(validator, json.loads(json.dumps(broken)))
        assert any(words in e for e in found), (words, found)
