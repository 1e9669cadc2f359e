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
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from edgepipe import __version__, cli_bench, cli_models, cli_plan
from edgepipe.core import native
from edgepipe.core.errors import EdgepipeError, NodeError, PipelineError
from edgepipe.core.graph_json import graph_dict
from edgepipe.core.loader import load_pipeline
from edgepipe.core.malloc import fix_mmap_threshold
from edgepipe.core.params import check_writable_file
from edgepipe.core.redact import RedactingFilter
from edgepipe.core.run import run
from edgepipe.core.runtime import Watcher
from edgepipe.health import seconds

log = logging.getLogger("edgepipe")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgepipe",
        description="Media + AI pipelines for edge devices.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"edgepipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run_p = sub.add_parser(
        "run",
        help="run a pipeline file until its sources end or SIGINT/SIGTERM",
        description="Run FILE's pipeline(). Extra --name value arguments are its parameters.",
        allow_abbrev=False,
    )
    run_p.add_argument("file", metavar="FILE", help="a pipeline file, e.g. pipelines/demo.py")
    run_p.add_argument("--duration", type=_seconds(above=0), metavar="SECONDS",
                       help="stop cleanly after this long")  # fmt: skip
    run_p.add_argument("--results", type=_output_file, metavar="PATH",
                       help="write every message reaching a sink as JSON lines ('-': stdout)")  # fmt: skip
    run_p.add_argument(
        "--stats", action="store_true", help="live per-node table on a terminal, summary at exit"
    )
    run_p.add_argument("--drain-timeout", type=_seconds(at_least=0), default=5.0, metavar="SECONDS",
                       help="on stop, how long queued items may take to drain (default 5)")  # fmt: skip
    run_p.add_argument(
        "--health-file",
        type=_output_file,
        metavar="PATH",
        default=os.environ.get("EDGEPIPE_HEALTH_FILE") or None,
        help="keep a heartbeat file fresh (see `edgepipe health`; default $EDGEPIPE_HEALTH_FILE)",
    )
    run_p.add_argument(
        "--headroom",
        type=_headroom,
        metavar="FRACTION",
        help="share of the usable cores kept free (default: the pipeline's, 0.3); 0: ungoverned",
    )
    run_p.add_argument(
        "--no-governor",
        action="store_true",
        help="do not slow any work to keep the headroom (measures still run; for comparison)",
    )
    run_p.add_argument(
        "--plan", action="store_true", help="print what it would reserve against the memory budget, and exit"
    )
    run_p.add_argument(
        "--port",
        type=_port,
        metavar="N",
        help="serve the viewer page (/), WebRTC, /metrics, /health and /graph on this port",
    )
    run_p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="H",
        help="serve on this address (not loopback: needs $EDGEPIPE_TOKEN)",
    )
    run_p.add_argument("--metrics-open", action="store_true", help="serve /metrics without the token")
    run_p.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="event loop (default: uvloop if installed)",
    )
    _add_common(run_p)

    graph_p = sub.add_parser(
        "graph",
        help="print the validated graph without running it",
        description="Validate FILE's pipeline() and print its nodes, channels and resources.",
        allow_abbrev=False,
    )
    graph_p.add_argument("file", metavar="FILE")
    graph_p.add_argument("--format", choices=("text", "json"), default="text")
    _add_common(graph_p)

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

    health_p = sub.add_parser(
        "health",
        help="exit 0 if a running pipeline's heartbeat file is fresh (for HEALTHCHECK)",
        allow_abbrev=False,
    )
    health_p.add_argument("file", metavar="PATH")
    health_p.add_argument("--max-age", type=seconds, default=30.0, metavar="SECONDS",
                          help="the heartbeat may be this old (default 30)")  # fmt: skip
    health_p.add_argument("--max-idle", type=seconds, metavar="SECONDS",
                          help="fail when no item moved for this long (default: the slowest source's "
                          "frame interval + 5 s)")  # fmt: skip
    return parser


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="debug logging and full tracebacks")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")


def _setup_logging(debug: bool, quiet: bool) -> None:
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:  # a password in a source URL is never logged
        handler.addFilter(RedactingFilter())
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
    (exit 134; :mod:`edgepipe.core.native`)."""
    code = main()
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
    if args.command == "probe":
        return _probe(args)
    if args.command == "models":
        return cli_models.main(args)
    if args.command == "bench":
        return cli_bench.main(args)
    if args.command == "health":
        from edgepipe.health import check

        healthy, reason = check(args.file, args.max_age, args.max_idle)
        print(reason, file=sys.stdout if healthy else sys.stderr)
        return EXIT_OK if healthy else EXIT_FAILED
    _setup_logging(args.debug, args.quiet)
    try:
        if args.command == "graph":
            return _graph(args, extra)
        return _run(args, extra)
    except PipelineError as exc:
        return _fail(exc, EXIT_USAGE, args.debug)
    except NodeError as exc:
        return _fail(exc, EXIT_FAILED, args.debug)
    except EdgepipeError as exc:
        return _fail(exc, EXIT_FAILED, args.debug)
    except KeyboardInterrupt:  # Ctrl-C before the pipeline's own handlers were installed
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"edgepipe: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILED


def _headroom(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1) (0.3 keeps 30% of the cores free), got {text}")
    return value


def _seconds(*, above: float | None = None, at_least: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a finite number of seconds above (or at least) a bound."""
    bound = f"above {above:g}" if above is not None else f"at least {at_least:g}"

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        low_ok = (above is None or value > above) and (at_least is None or value >= at_least)
        if not (math.isfinite(value) and low_ok):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds {bound}, got {text!r}")
        return value

    return seconds


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535 (0: any free one), got {text!r}")
    return value


def _output_file(text: str) -> str:
    """A file path that can be written (proven by opening it; nothing is left behind), or ``-``."""
    if text == "-":
        return text
    try:
        check_writable_file(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected {exc}, got {text!r}") from None
    return text


def _fail(exc: BaseException, code: int, debug: bool) -> int:
    if debug:
        logging.getLogger("edgepipe").error("error", exc_info=exc)
    print(f"edgepipe: error: {exc}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace, extra: list[str]) -> int:
    fix_mmap_threshold()  # a flat RSS over months (see edgepipe.core.malloc)
    pipeline = load_pipeline(args.file, extra)
    graph = pipeline.validate()
    if args.plan:
        return cli_plan.main(graph)
    watchers: list[Watcher] = []
    if args.port is not None:
        from edgepipe.serve import HttpServer, ServeConfig
        from edgepipe.serve.stream import streams_of

        streams_of(graph)  # two streams in one pipeline: exit 2 now, not at the first viewer
        server = HttpServer(ServeConfig.from_env(args.port, args.host, metrics_open=args.metrics_open))
        server.bind()  # a port in use stops here, before any camera is opened
        watchers.append(server)
    if args.stats:
        from edgepipe.console import live_stats

        watchers.append(live_stats(graph.name))
    if args.health_file:
        from edgepipe.health import heartbeat

        watchers.append(heartbeat(args.health_file))
    log.info("running '%s' from %s (%d nodes)", graph.name, args.file, len(graph.nodes))
    stream_module = sys.modules.get("edgepipe.serve.stream")  # imported by pipelines that stream only
    if args.port is None and stream_module is not None and stream_module.streams_of(graph):
        log.info("to watch it: add --port 8080, then open http://127.0.0.1:8080/")
    from edgepipe.sched import Scheduler

    scheduler = Scheduler(graph, headroom=args.headroom, governed=not args.no_governor)
    report = run(
        graph,
        loop=args.loop,
        duration_s=args.duration,
        results_path=args.results,
        drain_timeout_s=args.drain_timeout,
        handle_signals=True,
        watchers=watchers,
        debug=args.debug,
        scheduler=scheduler,
    )
    if args.stats:
        from edgepipe.console import print_summary

        print_summary(report.stats, graph.name)
    errors = sum(n.errors for n in report.stats.nodes)
    written = ""
    if args.results:
        written = f"; {report.results_written} results written to {args.results}"
        if report.results_reader_gone:
            written += " (its reader closed it)"
    log.info("'%s' ended (%s) after %.1f s; %d errors%s", graph.name, report.stopped_by, report.duration_s,
             errors, written)  # fmt: skip
    # Output that failed as a whole fails the run: exit 0 would say the recording or the
    # results are there.
    if report.results_error is not None:
        print(f"edgepipe: error: {report.results_error} ({report.results_lost} lost)", file=sys.stderr)
    for failed in report.failed_sinks:
        print(f"edgepipe: error: {failed}", file=sys.stderr)
    return EXIT_FAILED if report.output_failed else EXIT_OK


def _graph(args: argparse.Namespace, extra: list[str]) -> int:
    graph = load_pipeline(args.file, extra).validate()
    data = graph_dict(graph, graph.workers())
    if args.format == "json":
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(f"pipeline '{graph.name}': {len(graph.nodes)} nodes, {len(data['channels'])} channels")
    print("nodes:")
    width = max(len(n["id"]) for n in data["nodes"])
    for n in data["nodes"]:
        types = f"{n['in_type'] or '-'} -> {n['out_type'] or '-'}"
        print(f"  {n['id']:<{width}}  {n['kind']:<6}  {n['code']}  [{types}]  resource={n['resource']}"
              f"  on_error={n['on_error']}  ({n['declared_at']})")  # fmt: skip
    print("channels (one lane of its consumer's inbox each):")
    for c in data["channels"]:
        lane = "" if c["lane"] == c["from"] else f"[{c['lane']}]"
        print(f"  {c['from']} -> {c['to']}{lane}  size={c['size']} policy={c['policy']}")
    print("resources:")
    for r in data["resources"]:
        print(f"  {r['name']}: {r['threads']} thread(s) for {', '.join(r['nodes'])}")
    for warning in graph.warnings:
        print(f"warning: {warning}")
    return EXIT_OK


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
