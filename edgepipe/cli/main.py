"""The ``edgepipe`` command.

Exit codes: 0 success (including a stop by SIGINT/SIGTERM or ``--duration``, and standard
output closed by the reader of ``--results -``); 1 a node failed at run time, results could not
be written, or a sink wrote nothing it was given; 2 the pipeline file, its parameters or the
command line are wrong, found before anything starts. No traceback is shown unless ``--debug``.
"""

from __future__ import annotations

import argparse
import codecs
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

from edgepipe import __version__
from edgepipe.cli import bench, check_ops, compare, doctor, health, models, plan, probe, quantize, run, trace
from edgepipe.cli.exits import EXIT_OK, EXIT_USAGE
from edgepipe.cli.failures import error, handled, say
from edgepipe.core import native
from edgepipe.deploy.output import numbers_not_options
from edgepipe.runtime.stopsignals import StopRequested, finishing, raise_on_stop
from edgepipe.wire.redact import mask_process_output

log = logging.getLogger("edgepipe")


@dataclass(frozen=True)
class Command:
    """A subcommand of ``edgepipe``: its module, and what the command line does around it."""

    module: ModuleType
    """``add_parser(sub)`` adds the subcommand (``run``'s adds ``graph`` too); ``main(args)``
    runs it (``main(args, extra)`` with :attr:`parameters`) and returns its exit code. Looked up
    when called, never copied."""
    parameters: bool = False
    """It takes a pipeline's own parameters after FILE: what the parser leaves over is theirs.
    Any other command refuses it (unrecognized arguments, exit 2)."""
    stdout: bool = True
    """It prints its results on stdout: where stdout is closed it is refused (exit 2) before
    anything runs, rather than doing its work for no reader."""
    deployment: bool = False
    """A deployment command (:mod:`edgepipe.deploy`): warnings only in the log, a file name that
    is not UTF-8 written as the bytes it is (as ``ls`` does), and ``--opt -3e9`` read as a value
    (:func:`~edgepipe.deploy.output.numbers_not_options`)."""


COMMANDS: dict[str, Command] = {
    "run": Command(run, parameters=True, stdout=False),  # its stdout is --results -'s, if asked
    "graph": Command(run, parameters=True),
    "probe": Command(probe),
    "models": Command(models),
    "bench": Command(bench),
    "plan": Command(plan, deployment=True),
    "check-ops": Command(check_ops, deployment=True),
    "quantize": Command(quantize, deployment=True),
    "compare": Command(compare, deployment=True),
    "doctor": Command(doctor, deployment=True),
    "trace": Command(trace, deployment=True),
    "health": Command(health, stdout=False),  # a verdict in its exit code, for HEALTHCHECK
}
"""Every subcommand, in the order ``edgepipe --help`` lists them: the one dispatch table."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgepipe",
        description="Media + AI pipelines for edge devices.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"edgepipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in dict.fromkeys(command.module for command in COMMANDS.values()):
        module.add_parser(sub)
    for name, command in COMMANDS.items():
        if command.deployment:
            numbers_not_options(sub.choices[name])
    return parser


def _names_as_bytes(stream: Any) -> None:
    """A file name that is not UTF-8 (a str with surrogate escapes) reaches a UTF-8 ``stream``
    as the bytes it is, as ``ls`` writes it, never as an internal error (Python's stdout is
    strict outside the C locale); a stream in another encoding escapes what it cannot take."""
    if getattr(stream, "errors", None) != "strict" or not hasattr(stream, "reconfigure"):
        return
    utf8 = codecs.lookup(stream.encoding).name == "utf-8"
    stream.reconfigure(errors="surrogateescape" if utf8 else "backslashreplace")


SETTLE_S = 1.0
"""How long the command waits at exit for a model call in progress (a load or a run cannot be
interrupted; past this it is abandoned)."""


def entry() -> NoReturn:
    """The ``edgepipe`` command: :func:`main`, then an exit that never aborts. A model call
    still in progress on a worker thread when the run ended (a camera that could not be opened
    stops the run while the detector loads) is waited for; one that outlasts :data:`SETTLE_S`
    is left behind with ``os._exit``: a normal exit would destroy the C++ library under it
    (exit 134; :mod:`edgepipe.core.native`). Secrets in URLs are masked in every log line and
    traceback of the process (:func:`~edgepipe.wire.redact.mask_process_output`)."""
    raise_on_stop()  # a stop during start-up is a stop, not a death with 128 + N
    mask_process_output()
    try:
        code = main()
    except BrokenPipeError:  # `edgepipe graph FILE | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush there
        code = EXIT_OK
    except StopRequested as stop:
        finishing()  # a second request while this one is said must not cut it short
        code = _stopped(stop, sys.argv[1:])
    finishing()
    left = native.settle(SETTLE_S)
    if not left:
        sys.exit(code)
    say(f"edgepipe: {', '.join(left)} still in progress at exit: left behind")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, then run its subcommand (:data:`COMMANDS`) through the one error
    handler (:func:`~edgepipe.cli.failures.handled`): its exit code."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    command = COMMANDS[args.command]
    if extra and not command.parameters:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if command.stdout and not run.stdout_open():
        error(f"standard output is closed, and edgepipe {args.command} prints its results there: "
              "redirect it to a file (or /dev/null to discard them)")  # fmt: skip
        return EXIT_USAGE
    if command.deployment:
        logging.basicConfig(
            level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
        _names_as_bytes(sys.stdout)
    if command.parameters:
        return handled(lambda: command.module.main(args, extra), debug=args.debug)
    return handled(lambda: command.module.main(args), debug=getattr(args, "debug", False))


def _stopped(stop: StopRequested, argv: Sequence[str]) -> int:
    """A stop signal outside the run's own handling. For ``run`` it is a stop on request, exit 0
    at any moment (nothing had started, or everything had ended); a one-shot command (quantize,
    trace, doctor ...) did not finish its work, so it exits 128 + N as the shell expects, and
    no half-written file (each writes through a temporary file renamed into place)."""
    command = next((arg for arg in argv if not arg.startswith("-")), "")
    if command == "run":
        say(f"edgepipe: {stop.name} during start-up: stopped before the pipeline ran")
        return EXIT_OK
    say(f"edgepipe: {command or 'edgepipe'} stopped by {stop.name} before it finished")
    return 128 + stop.signum
