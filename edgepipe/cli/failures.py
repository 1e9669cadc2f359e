"""How a command's failure reaches its user, the same for every subcommand: one line on stderr,
``edgepipe: error: …`` (:func:`error`), secrets in URLs masked; and one table from the exceptions
a command lets out to exit codes (:data:`FAILURES`, applied by :func:`handled`).

A command that finds a problem itself says so with :func:`error` and returns its code
(:mod:`edgepipe.cli.exits`); what it lets out is :func:`handled`'s: a known failure is its line
and its code, anything else an internal error (exit 1), its traceback shown with ``--debug``.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable

from edgepipe.cli.exits import EXIT_FAILED, EXIT_USAGE
from edgepipe.core.errors import EdgepipeError, PipelineError
from edgepipe.deploy.output import MissingExtra
from edgepipe.runtime.stopsignals import StopRequested, stop_within
from edgepipe.wire.redact import redact_text

INTERRUPTED = 130
"""Ctrl-C in a process that has not turned SIGINT into a stop request: 128 + SIGINT, as the
shell would say."""

FAILURES: tuple[tuple[type[Exception], int], ...] = (
    (MissingExtra, EXIT_USAGE),  # an optional package is not installed: the line names its extra
    (PipelineError, EXIT_USAGE),  # the pipeline file or its parameters, found before it ran
    (EdgepipeError, EXIT_FAILED),  # a node stopped the run (NodeError), or another known failure
)
"""(exception, exit code), the first that matches: its message is the error line."""


def say(line: str) -> None:
    """A line for the user on stderr, with the secrets of any URL in it masked
    (:func:`~edgepipe.wire.redact.redact_text`)."""
    print(redact_text(line), file=sys.stderr)


def error(message: str) -> None:
    """``edgepipe: error: MESSAGE`` on stderr: the form of every command's error line."""
    say(f"edgepipe: error: {message}")


def handled(run: Callable[[], int], *, debug: bool = False) -> int:
    """``run()``'s exit code; or, for what it raises, the code of :data:`FAILURES` with its line
    (the traceback logged too with ``debug``). A stop signal and a reader closing stdout go up
    to :func:`edgepipe.cli.main.entry`, which says what they mean; anything else is an internal
    error: one line, or with ``debug`` the traceback, exit 1."""
    try:
        return run()
    except StopRequested:  # entry() says what it means for this command
        raise
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # `edgepipe doctor DIR --format json | head`: not an internal error
        raise
    except Exception as exc:
        for kind, code in FAILURES:
            if isinstance(exc, kind):
                if debug:
                    logging.getLogger("edgepipe").error("error", exc_info=exc)  # masked as it is made
                error(str(exc))
                return code
        if (stop := stop_within(exc)) is not None:  # a lazy import cut short by a stop signal
            raise stop from None
        if debug:  # the traceback, as Python would print it, with its secrets masked
            print(redact_text("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
            return EXIT_FAILED
        say(f"edgepipe: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)")
        return EXIT_FAILED
