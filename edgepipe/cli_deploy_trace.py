"""``edgepipe trace FILE --duration S``: where a pipeline's time goes (see
:mod:`edgepipe.deploy.trace_run`).

    edgepipe trace pipelines/face_privacy.py --duration 3
    edgepipe trace pipelines/face_privacy.py --duration 10 -o run.json --source clip.mp4

The pipeline file's own parameters follow it, as for ``edgepipe run``. Writes a Chrome-trace
JSON (``-o``, default ``trace.json``) and prints the summary. Exit 0: traced, nothing wrong;
1: the run failed, a node had errors, a buffer was rebuilt during the run or an expected fusion
is missing; 2: the command line, the file or its parameters are wrong (before anything runs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from edgepipe.core.exits import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.deploy.output import add_format, error, number, print_json, progress

DEFAULT_OUTPUT = "trace.json"
_SECONDS = number("a finite number of seconds above 0", above=0)


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=_SECONDS, metavar="SECONDS", help="how long to run (required)")
    p.add_argument("-o", "--trace-out", dest="trace_out", default=DEFAULT_OUTPUT, metavar="PATH",
                   help=f"the Chrome-trace JSON to write (default {DEFAULT_OUTPUT})")  # fmt: skip
    p.add_argument("--params", metavar="PATH", help="the pipeline's parameters from a TOML file")
    p.add_argument("--debug", action="store_true", help="full tracebacks")
    add_format(p)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "trace",
        help="run a pipeline with per-step timing and ONNX Runtime profiling; a Chrome trace",
        description="Run FILE's pipeline for --duration seconds with every node's calls timed and "
        "ONNX Runtime profiling on; print time per step (the slowest named), operators per "
        "provider, the fusions expected and found, buffers rebuilt during the run, where the time "
        "went and energy per frame; write a Chrome-trace JSON for Perfetto (ui.perfetto.dev). "
        "The pipeline's own parameters follow FILE.",
        allow_abbrev=False,
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="a pipeline file, e.g. pipelines/face_privacy.py")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    _add_options(p)
    p.set_defaults(trace_parser=p)


def _split(args: argparse.Namespace) -> list[str]:
    """Options of ``trace`` given after FILE go to ``args``; the rest is the pipeline's."""
    options = argparse.ArgumentParser(prog="edgepipe trace", add_help=False, allow_abbrev=False)
    _add_options(options)
    flags = options._option_string_actions
    mine: list[str] = []
    extra: list[str] = []
    rest = list(args.rest or [])
    i = 0
    while i < len(rest):
        action = flags.get(rest[i].split("=", 1)[0])
        if action is None:
            extra.append(rest[i])
            i += 1
            continue
        takes = 0 if action.nargs == 0 or "=" in rest[i] else 1
        mine += rest[i : i + 1 + takes]
        i += 1 + takes
    later = options.parse_args(mine)
    for key, value in vars(later).items():
        if value != options.get_default(key):
            setattr(args, key, value)
    return extra


def _reserved() -> dict[str, str]:
    options = argparse.ArgumentParser(add_help=False)
    _add_options(options)
    return {flag: "an option of edgepipe trace" for flag in options._option_string_actions}


def _help(args: argparse.Namespace) -> int:
    """``edgepipe trace FILE --help``: the options, then the pipeline's parameters."""
    from edgepipe import cli_params
    from edgepipe.core.errors import PipelineError
    from edgepipe.core.loader import read_pipeline

    parser: argparse.ArgumentParser = args.trace_parser
    if args.file is not None:
        try:
            cli_params.add_parameters(parser, read_pipeline(args.file, reserved=_reserved()))
        except PipelineError as exc:
            parser.print_help()
            error(f"{exc} (so its parameters cannot be listed)")
            return EXIT_USAGE
    parser.print_help()
    return EXIT_OK


def main(args: argparse.Namespace) -> int:
    from edgepipe.core.errors import EdgepipeError, PipelineError
    from edgepipe.core.params import check_writable_file
    from edgepipe.deploy.plan_pipeline import load_graph

    extra = _split(args)
    if {"-h", "--help"} & set(extra):
        return _help(args)
    if args.file is None:
        error("give a pipeline file: edgepipe trace pipelines/NAME.py --duration 3")
        return EXIT_USAGE
    if args.duration is None:
        error(f"give --duration SECONDS: how long to run {args.file}")
        return EXIT_USAGE
    try:
        check_writable_file(args.trace_out)
    except ValueError as exc:
        error(f"-o {args.trace_out}: expected {exc}")
        return EXIT_USAGE
    try:
        graph = load_graph(args.file, extra, _reserved(), args.params)
    except PipelineError as exc:
        if args.debug:
            raise
        error(str(exc))
        return EXIT_USAGE
    from edgepipe.deploy.trace_chrome import chrome_trace
    from edgepipe.deploy.trace_run import run_traced
    from edgepipe.deploy.trace_summary import summarize

    try:
        with progress(f"tracing {graph.name}", None, enabled=args.format == "text"):  # time elapsed
            run = run_traced(graph, args.duration, debug=args.debug)
    except EdgepipeError as exc:  # a node stopped the run
        if args.debug:
            raise
        error(f"{args.file}: the run failed: {exc}")
        return EXIT_PROBLEMS
    Path(args.trace_out).write_text(json.dumps(chrome_trace(run)))
    summary = summarize(run)
    summary["trace_file"] = str(args.trace_out)
    if args.format == "json":
        print_json(summary)
    else:
        from edgepipe.deploy.trace_text import print_summary

        print_summary(summary)
    return EXIT_PROBLEMS if summary["problems"] else EXIT_OK
