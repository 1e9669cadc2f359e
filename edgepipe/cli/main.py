"""The ``edgepipe`` command.

Exit codes: 0 success (including a stop by SIGINT/SIGTERM or ``--duration``, and standard
output closed by the reader of ``--results -``); 1 a node failed at run time, results could not
be written, or a sink wrote nothing it was given; 2 the pipeline file, its parameters or the
command line are wrong, found before anything starts. No traceback is shown unless ``--debug``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from edgepipe import __version__
from edgepipe.cli import (
    bench as cli_bench,
)
from edgepipe.cli import (
    deploy as cli_deploy,
)
from edgepipe.cli import (
    models as cli_models,
)
from edgepipe.cli import (
    run as cli_run,
)
from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from edgepipe.core import native
from edgepipe.core.errors import EdgepipeError, NodeError, PipelineError
from edgepipe.core.units import seconds
from edgepipe.runtime.stopsignals import StopRequested, finishing, raise_on_stop, stop_within
from edgepipe.wire.redact import mask_process_output, redact_text

log = logging.getLogger("edgepipe")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgepipe",
        description="Media + AI pipelines for edge devices.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"edgepipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    cli_run.add_parsers(sub)

    probe_p = sub.add_parser(
        "probe",
        help="which video decoders work here (decodes a small clip with each)",
        description="Try every hardware and software decoder of each codec on a small generated clip.",
        allow_abbrev=False,
    )
    probe_p.add_argument(
        "--codec", action="append", help="only this codec (repeatable): h264, hevc, vp9, av1, mjpeg"
    )
    probe_p.add_argument("--format", choices=("text", "json"), default="text")

    cli_models.add_parser(sub)
    cli_bench.add_parser(sub)
    cli_deploy.add_parsers(sub)

    health_p = sub.add_parser(
        "health",
        help="exit 0 if a running pipeline's heartbeat file is fresh (for HEALTHCHECK)",
        allow_abbrev=False,
    )
    health_p.add_argument("file", metavar="PATH")
    health_p.add_argument("--max-age", type=seconds(above=0), default=30.0, metavar="SECONDS",
                          help="the heartbeat may be this old (default 30)")  # fmt: skip
    health_p.add_argument("--max-idle", type=seconds(above=0), metavar="SECONDS",
                          help="fail when no item moved for this long (default: the slowest source's "
                          "frame interval + 5 s)")  # fmt: skip
    return parser


def _setup_logging(debug: bool, quiet: bool) -> None:
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    if not debug:  # ICE logs four lines of candidate checks per viewer: detail, not news
        logging.getLogger("aioice").setLevel(logging.WARNING)


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
    print(f"edgepipe: {', '.join(left)} still in progress at exit: left behind", file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if extra and args.command not in ("run", "graph"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command not in ("run", "health") and not cli_run.stdout_open():
        print(f"edgepipe: error: standard output is closed, and edgepipe {args.command} prints its "
              "results there: redirect it to a file (or /dev/null to discard them)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if args.command == "probe":
        return _probe(args)
    if args.command == "models":
        return cli_models.main(args)
    if args.command == "bench":
        return cli_bench.main(args)
    if cli_deploy.handles(args.command):
        return cli_deploy.main(args)
    if args.command == "health":
        from edgepipe.runtime.heartbeat import check

        healthy, reason = check(args.file, args.max_age, args.max_idle)
        print(reason, file=sys.stdout if healthy else sys.stderr)
        return EXIT_OK if healthy else EXIT_FAILED
    _setup_logging(args.debug, args.quiet)
    try:
        return cli_run.main(args, extra)
    except PipelineError as exc:
        return _fail(exc, EXIT_USAGE, args.debug)
    except NodeError as exc:
        return _fail(exc, EXIT_FAILED, args.debug)
    except EdgepipeError as exc:
        return _fail(exc, EXIT_FAILED, args.debug)
    except StopRequested:  # entry() says what it means for this command
        raise
    except KeyboardInterrupt:  # Ctrl-C in a process that has not called raise_on_stop()
        return 130
    except BrokenPipeError:  # stdout's reader closed it: not an internal error (see entry())
        raise
    except Exception as exc:
        if (stop := stop_within(exc)) is not None:  # a lazy import cut short by a stop signal
            raise stop from None
        if args.debug:  # the traceback, as Python would print it, with its secrets masked
            print(redact_text("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
            return EXIT_FAILED
        line = f"edgepipe: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"
        print(redact_text(line), file=sys.stderr)
        return EXIT_FAILED


def _stopped(stop: StopRequested, argv: Sequence[str]) -> int:
    """A stop signal outside the run's own handling. For ``run`` it is a stop on request, exit 0
    at any moment (nothing had started, or everything had ended); a one-shot command (quantize,
    trace, doctor ...) did not finish its work, so it exits 128 + N as the shell expects, and
    no half-written file (each writes through a temporary file renamed into place)."""
    command = next((arg for arg in argv if not arg.startswith("-")), "")
    if command == "run":
        print(f"edgepipe: {stop.name} during start-up: stopped before the pipeline ran", file=sys.stderr)
        return EXIT_OK
    print(f"edgepipe: {command or 'edgepipe'} stopped by {stop.name} before it finished", file=sys.stderr)
    return 128 + stop.signum


def _fail(exc: BaseException, code: int, debug: bool) -> int:
    """One line ``edgepipe: error: …`` (the traceback too with ``--debug``), secrets in URLs
    masked (a pipeline file's own error may quote its camera's URL)."""
    if debug:
        logging.getLogger("edgepipe").error("error", exc_info=exc)  # masked as it is made (entry())
    print(redact_text(f"edgepipe: error: {exc}"), file=sys.stderr)
    return code


def _probe(args: argparse.Namespace) -> int:
    from edgepipe.media.probe import TRIAL_ENCODERS, probe

    codecs = tuple(args.codec or TRIAL_ENCODERS)
    unknown = [c for c in codecs if c not in TRIAL_ENCODERS]
    if unknown:
        print(
            f"edgepipe: error: unknown codec {unknown[0]!r}; use: {', '.join(TRIAL_ENCODERS)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    trials = probe(codecs)
    if args.format == "json":
        print(
            json.dumps([t.__dict__ if hasattr(t, "__dict__") else _trial_dict(t) for t in trials], indent=2)
        )
        return EXIT_OK
    print(f"{'codec':<6} {'decoder':<16} {'kind':<8} {'works here':<10} {'ms':>6}  detail")
    for t in trials:
        kind = "hardware" if t.hardware else "software"
        works = "yes" if t.works else "no"
        print(f"{t.codec:<6} {t.decoder:<16} {kind:<8} {works:<10} {t.ms:>6.1f}  {t.reason}")
    hardware = [t.decoder for t in trials if t.works and t.hardware]
    summary = ": " + ", ".join(hardware) if hardware else "; video is decoded in software"
    print(f"\n{len(hardware)} hardware decoder(s) work here{summary}")
    return EXIT_OK


def _trial_dict(t: Any) -> dict[str, Any]:
    return {f: getattr(t, f) for f in t.__slots__}
