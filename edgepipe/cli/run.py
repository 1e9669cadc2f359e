"""``edgepipe run FILE`` and ``edgepipe graph FILE``: their options, and ``--help`` with the
pipeline's own parameters (:mod:`edgepipe.cli.params_help`).

Both take the pipeline's parameters after FILE (``--name value``) and from a TOML file
(``--params FILE.toml``: reserved for that file on every subcommand). A pipeline parameter whose
flag is one of these commands' options could never be given: the pipeline is refused (exit 2).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
from typing import Any

from edgepipe.cli import memory_plan
from edgepipe.cli import params_help as cli_params
from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.core.checks import check_writable_file, not_a_file
from edgepipe.core.errors import PipelineError
from edgepipe.core.units import seconds, whole
from edgepipe.graph.as_data import graph_dict
from edgepipe.pipefile.loader import PipelineFunction, read_pipeline
from edgepipe.runner import RunConfig, run
from edgepipe.runtime.engine import Watcher

log = logging.getLogger("edgepipe")


def add_parser(sub: Any) -> None:
    """Add ``run`` and ``graph`` to the ``edgepipe`` command's subparsers."""
    run_p = sub.add_parser(
        "run",
        help="run a pipeline file until its sources end or SIGINT/SIGTERM",
        usage="%(prog)s [-h] FILE [--params PATH] [OPTION ...] [--PARAMETER VALUE ...]",
        description="Run FILE's pipeline(). Its parameters (FILE --help lists them) follow FILE as "
        "--name value, or come from a TOML file (--params PATH); the command line wins.",
        allow_abbrev=False,
        add_help=False,
    )
    _add_file(run_p)
    run_p.add_argument("--duration", type=seconds(above=0), metavar="SECONDS",
                       help="stop cleanly after this long")  # fmt: skip
    run_p.add_argument("--results", type=_output_file, metavar="PATH",
                       help="write every message reaching a sink as JSON lines ('-': stdout)")  # fmt: skip
    run_p.add_argument(
        "--stats", action="store_true", help="live per-node table on a terminal, summary at exit"
    )
    run_p.add_argument("--drain-timeout", type=seconds(at_least=0), default=5.0, metavar="SECONDS",
                       help="on stop, how long queued items may take to drain (default 5)")  # fmt: skip
    run_p.add_argument(
        "--health-file",
        type=_heartbeat_file,
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
        type=whole(0, 65535, what="a port number 0-65535 (0: any free one)"),
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
        usage="%(prog)s [-h] FILE [--params PATH] [--format {text,json}] [--PARAMETER VALUE ...]",
        description="Validate FILE's pipeline() and print its nodes, channels and resources. Its "
        "parameters are given as to edgepipe run.",
        allow_abbrev=False,
        add_help=False,
    )
    _add_file(graph_p)
    graph_p.add_argument("--format", choices=("text", "json"), default="text")
    _add_common(graph_p)

    reserved: dict[str, list[str]] = {}
    for name, p in (("run", run_p), ("graph", graph_p)):
        for action in p._actions:
            for flag in action.option_strings:
                reserved.setdefault(flag, []).append(f"edgepipe {name}")
    flags = {flag: f"an option of {' and '.join(names)}" for flag, names in reserved.items()}
    for p in (run_p, graph_p):
        p.set_defaults(command_parser=p, reserved_flags=flags)


def _add_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("-h", "--help", action="store_true",
                   help="show this help and exit; with FILE, the pipeline's parameters too")  # fmt: skip
    p.add_argument("file", metavar="FILE", nargs="?", help="a pipeline file, e.g. pipelines/demo.py")
    p.add_argument(
        "--params", metavar="PATH", help="the pipeline's parameters from a TOML file (the command line wins)"
    )


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="debug logging and full tracebacks")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")


def main(args: argparse.Namespace, extra: list[str]) -> int:
    """``run`` or ``graph`` (``args.command``), after the command line was parsed."""
    _setup_logging(args.debug, args.quiet)
    parser: argparse.ArgumentParser = args.command_parser
    if args.help:
        return _help(parser, args)
    if args.file is None:
        parser.error("the following arguments are required: FILE")
    spec = read_pipeline(args.file, reserved=args.reserved_flags)
    if args.command == "graph":
        return _graph(args, spec, extra)
    return _run(args, spec, extra)


def _help(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The command's help; with FILE, its parameters after the options, or a line saying why
    they cannot be listed (exit 2: the file is wrong)."""
    if args.file is None:
        parser.print_help()
        return EXIT_OK
    try:
        spec = read_pipeline(args.file, reserved=args.reserved_flags)
        cli_params.add_parameters(parser, spec)
    except (PipelineError, argparse.ArgumentError) as exc:
        parser.print_help()
        sys.stdout.flush()
        where = "" if isinstance(exc, PipelineError) else f"{args.file}: "
        error(f"{where}{exc} (so its parameters cannot be listed)")
        return EXIT_USAGE
    parser.print_help()
    return EXIT_OK


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


def _headroom(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1) (0.3 keeps 30% of the cores free), got {text}")
    return value


def _output_file(text: str) -> str:
    """A file path that can be written (proven by opening it; nothing is left behind), or ``-``
    while standard output is open (closed, every result would be lost without a word)."""
    if text == "-":
        if not stdout_open():
            raise argparse.ArgumentTypeError(
                "'-' (standard output), but standard output is closed: give a file instead"
            )
        return text
    try:
        check_writable_file(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected {exc}, got {text!r}") from None
    return text


def _heartbeat_file(text: str) -> str:
    """A regular file (or none yet) that can be written: the heartbeat is replaced by a rename
    at each beat, which would put a file in place of a FIFO or a device."""
    if (kind := not_a_file(text)) is not None:
        raise argparse.ArgumentTypeError(f"a regular file for the heartbeat, but {text} is {kind}")
    return _output_file(text)


def stdout_open() -> bool:
    """Whether standard output can take writes (a shell's ``>&-`` closes it; Python then sets
    ``sys.stdout`` to None and every print is silently dropped)."""
    if sys.stdout is None:
        return False
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # a stream in memory (a test's capture, an embedding): it takes writes
        return not sys.stdout.closed
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _run(args: argparse.Namespace, spec: PipelineFunction, extra: list[str]) -> int:
    """Build the pipeline from the command line and run it through the library runner
    (:mod:`edgepipe.runner`: what ``edgepipe.run()`` does from Python)."""
    pipeline = spec.call(extra, params_file=args.params)
    graph = pipeline.validate()
    if args.plan:
        from edgepipe.sched.scheduler import run_budget

        budget = run_budget(graph, args.headroom, not args.no_governor)
        return memory_plan.main(graph, auto_instances=budget.instances)
    watchers: list[Watcher] = []
    if args.stats:
        from edgepipe.cli.console import live_stats

        watchers.append(live_stats(graph.name))
    log.info("running '%s' from %s (%d nodes)", graph.name, args.file, len(graph.nodes))
    stream_module = sys.modules.get("edgepipe.serve.webrtc_stream")  # imported by pipelines that stream only
    if args.port is None and stream_module is not None and stream_module.streams_of(graph):
        log.info("to watch it: add --port 8080, then open http://127.0.0.1:8080/")
    from edgepipe.serve.config import ServeError

    try:
        report = run(
            graph,
            RunConfig(
                loop=args.loop,
                headroom=args.headroom,
                governed=not args.no_governor,
                port=args.port,
                host=args.host,
                metrics_open=args.metrics_open,
                health_file=args.health_file,
                duration_s=args.duration,
                results_path=args.results,
                drain_timeout_s=args.drain_timeout,
                handle_signals=True,
                watchers=watchers,
                debug=args.debug,
            ),
        )
    except (
        ServeError
    ) as exc:  # the address could not be taken, before anything ran: the command line's to fix
        cause = exc.__cause__
        hint = ""
        if isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE:
            hint = " (another process listens there: choose another --port, or --port 0 for any free one)"
        elif isinstance(cause, OSError) and cause.errno == errno.EADDRNOTAVAIL:
            hint = " (not an address of this machine: check --host)"
        error(f"--port {args.port}: {exc}{hint}")
        return EXIT_USAGE
    if args.stats:
        from edgepipe.cli.console import print_summary

        print_summary(report.stats, graph.name)
    errors = sum(n.errors for n in report.stats.nodes)
    written = ""
    if args.results:
        written = f"; {report.results_written} results written to {args.results}"
        if report.results_reader_gone:
            written += " (its reader closed it)"
    outputs_failed = len(report.failed_sinks) + (report.results_error is not None)
    written += f"; {outputs_failed} output(s) failed (below)" if outputs_failed else ""
    log.info("'%s' ended (%s) after %.1f s; %d errors%s", graph.name, report.stopped_by, report.duration_s,
             errors, written)  # fmt: skip
    # Output that failed as a whole fails the run: exit 0 would say the recording or the
    # results are there.
    if report.results_error is not None:
        error(f"{report.results_error} ({report.results_lost} lost)")
    for failed in report.failed_sinks:
        error(str(failed))
    return EXIT_FAILED if report.output_failed else EXIT_OK


def _graph(args: argparse.Namespace, spec: PipelineFunction, extra: list[str]) -> int:
    graph = spec.call(extra, params_file=args.params).validate()
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
        live = "  (a live source's frames)" if c["live_frames"] else ""
        print(f"  {c['from']} -> {c['to']}{lane}  size={c['size']} policy={c['policy']}{live}")
    print("resources:")
    for r in data["resources"]:
        print(f"  {r['name']}: {r['threads']} thread(s) for {', '.join(r['nodes'])}")
    for warning in data["warnings"]:  # redacted
        print(f"warning: {warning}")
    return EXIT_OK
