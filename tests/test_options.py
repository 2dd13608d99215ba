"""Each run option and each setting is declared once; the command line's flags, the MCP
tools' fields and docs/settings.md are made from those declarations."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import typer

from krung.host import options
from krung.host.cli import app
from krung.protocol import settings as settings_module
from krung.protocol.errors import UsageError
from krung.protocol.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"run": options.RUN, "watch": options.WATCH, "batch": options.BATCH,
            "suite": options.SUITE}


def test_docs_settings_md_is_what_the_declarations_make():
    committed = (ROOT / "docs" / "settings.md").read_text()
    assert committed == options.markdown(), (
        "docs/settings.md is stale: python -m krung.host.options --markdown > docs/settings.md")
    for _, declared in settings_module.declarations():
        assert f"`{declared.env}`" in committed
    for option in options.OPTIONS.values():
        assert f"`{option.cli_flag}`" in committed


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_a_command_is_derived_from_its_declaration(command):
    """The command's options are exactly the declared ones it names (nothing written by hand
    beside them), with the declared flag, default and help."""
    group = typer.main.get_command(app)
    found = {p.name: p for p in group.commands[command].params
             if p.param_type_name == "option" and p.name != "help"}
    assert set(found) == set(COMMANDS[command])
    for name, param in found.items():
        option = options.OPTIONS[name]
        assert param.opts == [option.cli_flag], name
        assert param.help is not None and param.help.startswith(option.described.rstrip(".")), name
        assert param.required == (option.default is options.REQUIRED), name
        if not param.required:
            assert param.default == option.default or (not param.default and not
                                                       option.default), name


def test_the_mcp_tools_fields_are_the_declared_options():
    pytest.importorskip("mcp.server.mcpserver", reason="the MCP server needs `krung[mcp]`")
    from krung.host.mcp import build_server

    async def schemas():
        server = build_server(Path("/nonexistent/krung.db"))
        return {t.name: t.input_schema for t in await server.list_tools()}

    found = asyncio.run(schemas())
    own = {"problem", "version_path", "source", "name"}  # the version, not a run option
    for tool, names in (("evaluate", options.EVALUATE_TOOL), ("profile", options.PROFILE_TOOL)):
        fields = found[tool]["properties"]
        assert set(fields) - own == set(names), tool
        for name in names:
            assert fields[name]["description"] == options.OPTIONS[name].described, name
            assert fields[name].get("default") == options.OPTIONS[name].default, name
    assert found["evaluate"]["properties"]["seed"]["anyOf"][0]["minimum"] == 0


def test_every_declared_option_is_taken_somewhere_and_overrides_a_real_setting():
    taken = {*options.EVALUATE_TOOL, *options.PROFILE_TOOL}.union(*COMMANDS.values())
    assert taken == set(options.OPTIONS)
    fields = {f.name for f, _ in settings_module.declarations()}
    for option in options.OPTIONS.values():
        assert option.setting is None or option.setting in fields, option.name


def test_options_override_the_environment_and_bad_values_name_the_option():
    env_timeout, given_timeout = random.uniform(1, 50), random.uniform(51, 99)
    base = Settings.from_env({"KRUNG_CALL_TIMEOUT": str(env_timeout),
                              "KRUNG_COMPILED_BASELINE": "1"})
    assert base.call_timeout_s == env_timeout
    given = {"timeout": None, "vs_compiled": False, "store": None, "seed": 3}
    assert options.settings_of(given, base) == base  # unset options change nothing
    chosen = options.settings_of({**given, "timeout": given_timeout, "device": "cpu",
                                  "store": Path("/x/k.db")}, base)
    assert (chosen.call_timeout_s, chosen.device, chosen.store) == (
        given_timeout, "cpu", Path("/x/k.db"))
    assert chosen.compiled_baseline is True  # the environment's, kept
    with pytest.raises(UsageError, match="--timeout=-1") as info:
        options.settings_of({"timeout": -1}, base)
    assert "--timeout" in (info.value.hint or "")
    with pytest.raises(UsageError, match="--timeout=0"):
        options.settings_of({"timeout": 0}, base)  # 0 is a value, not an option left out
    with pytest.raises(UsageError, match="--device='tpu'"):
        options.settings_of({"device": "tpu"}, base)


def test_a_bad_option_on_the_command_line_is_named_by_its_flag(tmp_path):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["run", "softmax", str(tmp_path / "v.py"), "--timeout",
                                      "-2", "--store", str(tmp_path / "k.db")])
    assert result.exit_code != 0
    assert isinstance(result.exception, UsageError), result.output
    assert "--timeout=-2.0" in str(result.exception)
