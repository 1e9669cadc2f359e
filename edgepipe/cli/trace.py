"""``edgepipe trace FILE --duration S``: where a pipeline's time goes (see
:mod:`edgepipe.deploy.trace.traced`).

    edgepipe trace pipelines/face_privacy.py --duration 3
    edgepipe trace pipelines/face_privacy.py --duration 10 -o run.json --source clip.mp4

The pipeline file's own parameters follow it, as for ``edgepipe run``. Writes a Chrome-trace
JSON (``-o``, default ``trace.json``, replaced whole or not at all: see
:mod:`edgepipe.deploy.files`) and prints the summary. Exit 0: traced, nothing wrong; 1: the run
failed, a node had errors, a buffer was rebuilt during the run, an expected fusion is missing,
or the trace file could not be written (a full disk); 2: the command line, the file, its
parameters or ``-o`` are wrong (before anything runs).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.cli.params_help import own_options
from edgepipe.core.units import number
from edgepipe.deploy.output import add_format, print_json, progress

DEFAULT_OUTPUT = "trace.json"
_SECONDS = number("a finite number of seconds above 0", above=0)


def _add_options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """``trace``'s options; the actions added (their flags are reserved: :func:`_reserved`)."""
    return [
        p.add_argument("--duration", type=_SECONDS, metavar="SECONDS", help="how long to run (required)"),
        p.add_argument("-o", "--trace-out", dest="trace_out", default=DEFAULT_OUTPUT, metavar="PATH",
                       help=f"the Chrome-trace JSON to write (default {DEFAULT_OUTPUT})"),
        p.add_argument("--params", metavar="PATH", help="the pipeline's parameters from a TOML file"),
        p.add_argument("--debug", action="store_true", help="full tracebacks"),
        add_format(p),
    ]  # fmt: skip


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


def _reserved() -> dict[str, str]:
    actions = _add_options(argparse.ArgumentParser(add_help=False))
    return {flag: "an option of edgepipe trace" for action in actions for flag in action.option_strings}


def _help(args: argparse.Namespace) -> int:
    """``edgepipe trace FILE --help``: the options, then the pipeline's parameters."""
    from edgepipe.cli import params_help as cli_params

    parser: argparse.ArgumentParser = args.trace_parser
    return cli_params.print_help(parser, args.file, _reserved())


def main(args: argparse.Namespace) -> int:
    from edgepipe.core.errors import EdgepipeError, PipelineError, os_reason
    from edgepipe.deploy.files import PathError, check_input, check_output, write_output
    from edgepipe.deploy.plan.pipeline import load_graph

    options = argparse.ArgumentParser(prog="edgepipe trace", add_help=False, allow_abbrev=False)
    _add_options(options)
    extra = own_options(options, args)  # options of trace's after FILE; the rest are the pipeline's
    try:
        if args.file is not None:  # before --help reads it: a FIFO would block
            check_input(args.file, args.file, give="give a pipeline file, e.g. pipelines/face_privacy.py")
    except PathError as exc:
        error(str(exc))
        return EXIT_USAGE
    if {"-h", "--help"} & set(extra):
        return _help(args)
    if args.file is None:
        error("give a pipeline file: edgepipe trace pipelines/NAME.py --duration 3")
        return EXIT_USAGE
    if args.duration is None:
        error(f"give --duration SECONDS: how long to run {args.file}")
        return EXIT_USAGE
    try:
        if args.params is not None:
            check_input(
                args.params, f"--params {args.params}", give="give a TOML file of the pipeline's parameters"
            )
        out = check_output(args.trace_out, "-o", force=True)  # trace.json is replaced, run after run
    except PathError as exc:
        error(str(exc))
        return EXIT_USAGE
    try:
        graph = load_graph(args.file, extra, _reserved(), args.params)
    except PipelineError as exc:
        if args.debug:
            raise
        error(str(exc))
        return EXIT_USAGE
    from edgepipe.deploy.trace.chrome import chrome_trace
    from edgepipe.deploy.trace.summary import summarize
    from edgepipe.deploy.trace.traced import run_traced

    try:
        with progress(f"tracing {graph.name}", None, enabled=args.format == "text"):  # time elapsed
            run = run_traced(graph, args.duration, debug=args.debug)
    except EdgepipeError as exc:  # a node stopped the run
        if args.debug:
            raise
        error(f"{args.file}: the run failed: {exc}")
        return EXIT_PROBLEMS
    summary = summarize(run)
    failed = ""
    try:  # whole or not at all: a full disk leaves no truncated JSON, and the old file as it was
        write_output(out, json.dumps(chrome_trace(run)))
        summary["trace_file"] = str(args.trace_out)
    except OSError as exc:
        summary["trace_file"] = None
        failed = f"cannot write {args.trace_out}: {os_reason(exc)} (no trace file written; "
        failed += "the summary is on stdout)"
    if args.format == "json":
        print_json(summary)
    else:
        from edgepipe.deploy.trace.text import print_summary

        print_summary(summary)
    if failed:
        error(failed)
        return EXIT_FAILED
    return EXIT_PROBLEMS if summary["problems"] else EXIT_OK
