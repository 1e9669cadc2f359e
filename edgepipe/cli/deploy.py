"""The deployment commands (``plan``, ``check-ops``, ``quantize``, ``compare``, ``doctor``,
``trace``): one module each, ``edgepipe.deploy.NAME.command``, with ``add_parser(sub)`` and
``main(args) -> int``. They are imported when the parser is built (keep their top level light:
heavy imports go inside ``main``), and share :mod:`edgepipe.deploy.output`'s conventions.
"""

from __future__ import annotations

import argparse
import codecs
import importlib
import importlib.util
import logging
import sys
from types import ModuleType
from typing import Any

from edgepipe.cli.exits import EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.deploy.output import MissingExtra, error, numbers_not_options
from edgepipe.runtime.stopsignals import StopRequested, stop_within

COMMANDS = ("plan", "check-ops", "quantize", "compare", "doctor", "trace")


def _module_name(command: str) -> str:
    """``check-ops`` -> ``edgepipe.deploy.check_ops.command``: each command's folder holds it."""
    return f"edgepipe.cli.{command.replace('-', '_')}"


def _modules() -> dict[str, ModuleType]:
    found = {}
    for command in COMMANDS:
        name = _module_name(command)
        if importlib.util.find_spec(name) is not None:
            found[command] = importlib.import_module(name)
    return found


def add_parsers(sub: Any) -> None:
    for command, module in _modules().items():
        module.add_parser(sub)
        numbers_not_options(sub.choices[command])  # `--param-count -3e9`: a value, not an option


def handles(command: str | None) -> bool:
    return command in COMMANDS


def _names_as_bytes(stream: Any) -> None:
    """A file name that is not UTF-8 (a str with surrogate escapes) reaches a UTF-8 ``stream``
    as the bytes it is, as ``ls`` writes it, never as an internal error (Python's stdout is
    strict outside the C locale); a stream in another encoding escapes what it cannot take."""
    if getattr(stream, "errors", None) != "strict" or not hasattr(stream, "reconfigure"):
        return
    utf8 = codecs.lookup(stream.encoding).name == "utf-8"
    stream.reconfigure(errors="surrogateescape" if utf8 else "backslashreplace")


def main(args: argparse.Namespace) -> int:
    """Run ``args.command``; a missing optional package is a one-line error, exit 2; an
    unexpected failure is one line too (``--debug`` where the command has it shows the trace)."""
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    _names_as_bytes(sys.stdout)
    module = importlib.import_module(_module_name(args.command))
    try:
        code: int = module.main(args)
    except MissingExtra as exc:
        error(str(exc))
        return EXIT_USAGE
    except StopRequested:  # a stop signal: cli.entry() says so and picks the code
        raise
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `edgepipe doctor DIR --format json | head`: cli.entry() ends it quietly
        raise
    except Exception as exc:
        if (stop := stop_within(exc)) is not None:  # a lazy import cut short by a stop signal
            raise stop from None
        if getattr(args, "debug", False):
            raise
        error(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)")
        return EXIT_PROBLEMS
    return code
