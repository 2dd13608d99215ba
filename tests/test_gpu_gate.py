"""The GPU gate's own counting (scripts/gpu_gate.py), on a CPU: a chunk of tests is run by a
real pytest and counted test by test from its verbose output, whatever each one's outcome."""

from __future__ import annotations

import importlib.util
import random
import textwrap

from tests.conftest import REPO


def _gate():
    spec = importlib.util.spec_from_file_location("gpu_gate", REPO / "scripts" / "gpu_gate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_outcome_of_a_chunk_is_counted_expected_failures_and_skips_with_reasons(tmp_path):
    """pytest -v writes `XFAIL (reason)` and `SKIPPED (reason)`: they count as passed and
    skipped, an unexpected pass as failed, and no test goes uncounted."""
    gate = _gate()
    n = random.randint(2, 5)
    (tmp_path / "test_chunk.py").write_text(textwrap.dedent(f"""
        import pytest

        @pytest.mark.parametrize("i", range({n}))
        def test_passes(i):
            assert i >= 0

        @pytest.mark.xfail(reason="known (a reason with (parentheses))")
        def test_expected_to_fail():
            assert False

        @pytest.mark.xfail(reason="no longer")
        def test_passes_unexpectedly():
            assert True

        @pytest.mark.skip(reason="needs a CUDA GPU (none here)")
        def test_skipped():
            pass

        def test_fails():
            assert False
    """))
    nodes = [str(tmp_path / "test_chunk.py")]
    counted = gate.run_tests(nodes, 0, tmp_path, limit_s=120)
    assert (counted["passed"], counted["skipped"], counted["failed"]) == (n + 1, 1, 2), counted
    assert any("test_fails" in f for f in counted["failures"]), counted
