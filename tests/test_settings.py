"""Settings come from one place and bad values name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from krung.protocol.errors import UsageError
from krung.protocol.settings import Settings


def test_environment_overrides_defaults():
    settings = Settings.from_env({"KRUNG_STORE": "/x/k.db", "KRUNG_SEEDS": "5",
                                  "KRUNG_CALL_TIMEOUT": "2.5", "KRUNG_DEVICE": "cpu"})
    assert settings.store == Path("/x/k.db")
    assert settings.seeds == 5 and settings.call_timeout_s == 2.5 and settings.device == "cpu"
    assert Settings.from_env({}) == Settings()


@pytest.mark.parametrize("key, value", [("KRUNG_SEEDS", "0"), ("KRUNG_SEEDS", "three"),
                                        ("KRUNG_CALL_TIMEOUT", "-1"), ("KRUNG_DEVICE", "tpu")])
def test_bad_values_name_the_key(key, value):
    with pytest.raises(UsageError) as info:
        Settings.from_env({key: value})
    assert key in str(info.value)
    assert info.value.hint


def test_replace_ignores_none_and_checks_values():
    settings = Settings()
    assert settings.replace(device=None) == settings
    assert settings.replace(call_timeout_s=3).call_timeout_s == 3.0
    with pytest.raises(UsageError, match="--device"):
        settings.replace(device="gpu")


def test_the_roofline_threshold_is_a_percentage():
    assert Settings().roofline_threshold_pct == 90.0
    assert Settings.from_env({"KRUNG_ROOFLINE_THRESHOLD": "80"}).roofline_threshold_pct == 80.0
    assert Settings().replace(roofline_threshold_pct=100).roofline_threshold_pct == 100.0
    for bad in ("0", "-5", "ninety"):
        with pytest.raises(UsageError, match="KRUNG_ROOFLINE_THRESHOLD"):
            Settings.from_env({"KRUNG_ROOFLINE_THRESHOLD": bad})
    with pytest.raises(UsageError, match="is above 100%") as info:
        Settings.from_env({"KRUNG_ROOFLINE_THRESHOLD": "150"})
    assert info.value.hint == ("set KRUNG_ROOFLINE_THRESHOLD to a percentage in (0, 100], "
                               "e.g. 90")


def test_the_cpu_check_budget_may_be_zero_as_documented():
    """0 turns the budget off (every case as declared); below 0 means nothing."""
    assert Settings.from_env({"KRUNG_CPU_CHECK_BUDGET": "0"}).cpu_check_budget_s == 0
    with pytest.raises(UsageError, match="KRUNG_CPU_CHECK_BUDGET='-1' is not a valid float"):
        Settings.from_env({"KRUNG_CPU_CHECK_BUDGET": "-1"})
    with pytest.raises(UsageError, match="KRUNG_SEEDS='0' is not a valid int"):
        Settings.from_env({"KRUNG_SEEDS": "0"})
