"""How the `krung` command ends when a command does not: one message, the right exit status.

Three kinds of error reach cli.main: a krung error (bad usage or a broken problem, exit 2),
a usage error of the command line parser (exit 2), and anything else, a bug in krung (exit 3).
Each prints as `Type: message` and `hint: ...` on stderr or, when the command line asked for
JSON, as one JSON object on stdout:
`{"ok": false, "error": "Type: message", "error_type": ..., "hint": ..., "exit_code": ...}`.

The parser is click, but which click depends on typer: up to 0.2x typer uses the `click`
package; typer 0.29 vendors its own copy (`typer._click`), whose exceptions are other classes.
So a parser error is recognised by its class names, never by importing one click or the other.
"""

from __future__ import annotations

import itertools
import json
import sys
import traceback
from collections.abc import Sequence
from typing import Any

USAGE, INTERNAL = 2, 3  # cli.ExitCode


def asks_for_json(args: Sequence[str]) -> bool:
    """Whether the command line asked for JSON (--json, --format json): read from the words
    themselves, so that an error the parser raises before any option is read is JSON too."""
    words = list(args[:args.index("--")] if "--" in args else args)
    return ("--json" in words or "--format=json" in words
            or any(pair == ("--format", "json") for pair in itertools.pairwise(words)))


def is_parser_error(exc: BaseException) -> bool:
    """click's ClickException (usage errors and bad values), from either click."""
    return any(cls.__name__ == "ClickException" for cls in type(exc).__mro__)


def parser_error(exc: Any, wants_json: bool) -> int:
    """A command line the parser refused: its usage line, the message, where help is."""
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command_path", None) or "krung"
    message = exc.format_message().strip()
    if type(exc).__name__ == "NoArgsIsHelpError" and not wants_json:  # `krung`, `krung context`
        # click puts the help in the message; typer's vendored click has printed it already
        sys.stderr.write(f"{message}\n" if message else "")
        return USAGE
    if type(exc).__name__ == "NoArgsIsHelpError":
        message = f"{command} needs a command"
    usage = ctx.get_usage() if ctx is not None and not wants_json else None
    return report("UsageError", message, f"`{command} --help` says what it takes", USAGE,
                  wants_json, before=usage)


def internal_error(exc: BaseException, wants_json: bool) -> int:
    """A bug in krung: the traceback on stderr, the one-line error as for any other."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return report("InternalError", f"{type(exc).__name__}: {exc}",
                  "a bug in krung itself, not in your version: the traceback is on stderr",
                  INTERNAL, wants_json)


def report(error_type: str, message: str, hint: str | None, code: int, wants_json: bool,
           before: str | None = None) -> int:
    if wants_json:
        sys.stdout.write(json.dumps(error_json(error_type, message, hint, code), indent=2) + "\n")
    else:
        lines = [before, f"{error_type}: {message}", f"hint: {hint}" if hint else None]
        sys.stderr.write("".join(f"{line}\n" for line in lines if line))
    return code


def error_json(error_type: str, message: str, hint: str | None, code: int) -> dict[str, Any]:
    return {"ok": False, "error": f"{error_type}: {message}", "error_type": error_type,
            "hint": hint, "exit_code": code}
