"""The per-dtype policy and a problem's overrides."""

from __future__ import annotations

from krung.judge import tolerance
from krung.judge.tolerance import DEFAULTS, EXACT


def test_defaults_per_dtype():
    assert tolerance.resolve("float32").atol == 1e-4
    assert tolerance.resolve("bfloat16").min_psnr_db is not None
    assert tolerance.resolve("int32") == EXACT


def test_overrides():
    assert tolerance.resolve("float32", "tf32") == DEFAULTS["tf32"]
    assert tolerance.resolve("float32", {"atol": 1e-3}).atol == 1e-3
    assert tolerance.resolve("float32", {"atol": 1e-3}).rtol == 1e-4
    per_dtype = {"bfloat16": {"atol": 5e-2}}
    assert tolerance.resolve("bfloat16", per_dtype).atol == 5e-2
    assert tolerance.resolve("float32", per_dtype) == DEFAULTS["float32"]


def test_bad_overrides_are_named():
    assert tolerance.check_override({"atol": 1e-3}, {"float32"}) == []
    assert tolerance.check_override("tf33", set()) == ["tolerance 'tf33' is not a known policy"]
    assert "neither a dtype nor a Tolerance field" in tolerance.check_override(
        {"atoll": 1}, {"float32"})[0]
    assert tolerance.check_override(3, set())
