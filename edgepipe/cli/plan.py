"""``edgepipe plan``: the sums before choosing hardware (see :mod:`edgepipe.deploy.plan.capacity`).

    edgepipe plan --param-count 3e9 --dtype fp16 --tokens-per-s 20 --device jetson-orin-nano-8gb
    edgepipe plan ./model-dir --tokens-per-s 10 --device rk3588 --streams 4 --codec h265
    edgepipe plan pipelines/describe_scene.py --model ./model-dir --device raspberry-pi-5

A pipeline file's own parameters follow it, as for ``edgepipe run``. Exit 0: it fits; 1: a
limit is passed (bandwidth, compute, memory, decoder); 2: the command line or an input (a model
file, a pipeline file or its parameters) is wrong.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Set as AbstractSet
from typing import Any

from edgepipe.cli.exits import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.cli.params_help import own_options
from edgepipe.core.units import whole
from edgepipe.deploy.output import POSITIVE, add_format, print_json

PIPELINE_SUFFIX = ".py"
PARAM_COUNT = whole(1, what="a count of parameters: a positive whole number (3e9, 7241732096)")
"""A parameter count is an integer: ``3.5`` is refused, never planned as 3."""


def _add_options(p: argparse.ArgumentParser, theirs: AbstractSet[str] = frozenset()) -> None:
    """``plan``'s options, less those whose flag is in ``theirs``: a pipeline's parameters have
    them there (``hello.py``'s ``--fps``). :data:`KEPT_FLAGS` are never theirs."""

    def add(flag: str, **kwargs: Any) -> None:
        if flag not in theirs:
            p.add_argument(flag, **kwargs)

    add("--param-count", type=PARAM_COUNT, metavar="N", help="parameters of the model (3e9)")
    add(
        "--dtype",
        choices=("fp32", "fp16", "bf16", "int8", "int4"),
        help="weight dtype (default: the model file's; fp16 with --param-count)",
    )
    add("--tokens-per-s", type=POSITIVE, metavar="R", help="target decode rate")
    add("--device", metavar="NAME", help="a device of the table (--list-devices)")
    add("--bandwidth-gb-s", type=POSITIVE, metavar="GB_S", help="memory bandwidth (overrides the table)")
    add("--tops", type=POSITIVE, metavar="TOPS", help="peak compute, tera-ops/s (overrides the table)")
    add("--ram-gb", type=POSITIVE, metavar="GB", help="memory (overrides the table)")
    add(
        "--max-seq-len",
        type=whole(1),
        metavar="N",
        help="positions per sequence (default: the model's, 2048 with --param-count)",
    )
    add("--sequences", type=whole(1), default=1, metavar="N", help="concurrent sequences (default 1)")
    add("--layers", type=whole(1), metavar="N", help="with --param-count: decoder layers")
    add("--kv-heads", type=whole(1), metavar="N", help="with --param-count: KV heads")
    add("--head-dim", type=whole(1), metavar="N", help="with --param-count: head dimension")
    add("--heads", type=whole(1), metavar="N", help="with --param-count: attention heads")
    add(
        "--streams",
        type=whole(1),
        metavar="N",
        help="video streams to decode; with a pipeline file, N streams in place of its own camera(s)",
    )
    add(
        "--resolution",
        metavar="WxH",
        help="of each stream (default: a pipeline's camera's, else 1920x1080)",
    )
    add("--fps", type=POSITIVE, help="of each stream (default: a pipeline's camera's, else 30)")
    add(
        "--codec",
        help="of the streams (h264, h265, av1, vp9; default: a pipeline's camera's, else h264; "
        "a synthetic camera is planned as sending it)",
    )
    add("--params", metavar="PATH", help="a pipeline's parameters from a TOML file")
    add("--list-devices", action="store_true", help="list the device table and exit")
    add("--debug", action="store_true", help="full tracebacks")
    add_format(p)


DESCRIPTION = (
    "The sums before choosing hardware: bytes read per token, bandwidth and compute needed, the KV "
    "cache term by term, the memory plan against the device's RAM with 30% kept free, video decode "
    "load, and what to change. TARGET is an ONNX decoder (file or folder) or a pipeline file, whose "
    "own parameters follow it."
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="capacity sums: bandwidth, compute, KV cache, memory and decode against a device",
        description=DESCRIPTION,
        allow_abbrev=False,
    )
    _add_arguments(p)


def _add_arguments(p: argparse.ArgumentParser, theirs: AbstractSet[str] = frozenset()) -> None:
    p.add_argument(
        "target", nargs="?", metavar="TARGET", help="model.onnx, a model folder, or pipelines/X.py"
    )
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    _add_options(p, theirs)


KEPT_FLAGS = ("--params", "--format", "--debug", "--list-devices", "-h", "--help")
"""The options a pipeline file's parameters may not take. Any other option of ``plan`` with the
flag of one of the pipeline's parameters (``hello.py``'s ``--fps``) is the pipeline's there."""


def _reserved() -> dict[str, str]:
    return dict.fromkeys(KEPT_FLAGS, "an option of edgepipe plan")


def _pipeline_flags(target: str | None) -> set[str]:
    """The flags of the pipeline file's parameters (none if it cannot be read: its error comes
    later, where it is planned)."""
    from edgepipe.core.errors import PipelineError
    from edgepipe.pipefile.loader import flags_of, read_pipeline

    if target is None or not target.endswith(PIPELINE_SUFFIX):
        return set()
    try:
        return {f for param in read_pipeline(target, reserved=_reserved()).params for f in flags_of(param)}
    except PipelineError:
        return set()


def main(args: argparse.Namespace) -> int:
    from edgepipe.deploy.files import PathError
    from edgepipe.deploy.plan.devices import UnknownDevice, devices

    extra: list[str] = []
    try:
        _check_target(args.target)  # before its flags are read: a FIFO named x.py would block
    except PathError as exc:
        error(str(exc))
        return EXIT_USAGE
    if args.rest:  # options of plan's after TARGET; the rest are the pipeline's parameters
        options = argparse.ArgumentParser(prog="edgepipe plan", add_help=False, allow_abbrev=False)
        _add_options(options, _pipeline_flags(args.target))  # a flag both have is the pipeline's
        extra = own_options(options, args)
    if args.list_devices:
        return _list(args, devices())
    is_pipeline = args.target is not None and args.target.endswith(PIPELINE_SUFFIX)
    if {"-h", "--help"} & set(extra):
        return _help(args)
    if extra and not is_pipeline:
        error(f"unrecognized arguments: {' '.join(extra)}")
        return EXIT_USAGE
    try:
        return _plan(args, extra, is_pipeline)
    except (UnknownDevice, ValueError) as exc:
        if args.debug:
            raise
        error(str(exc))
        return EXIT_USAGE


def _check_target(target: str | None) -> None:
    """TARGET is a pipeline file, or a model file or folder: PathError for one that is missing,
    empty or not a file (a FIFO, a device)."""
    from edgepipe.deploy.files import check_input, check_model

    if target is None:
        return
    if target.endswith(PIPELINE_SUFFIX):
        check_input(target, target, give="give the path of a pipeline file (.py)")
    elif os.path.isdir(target) and os.path.lexists(inside := os.path.join(target, "model.onnx")):
        check_model(inside, f"model {inside}", give="give an ONNX decoder: its .onnx file or folder")
    else:
        check_model(
            target, f"model {target}", give="give an ONNX decoder: its .onnx file or folder", folder=True
        )


def _help(args: argparse.Namespace) -> int:
    """``edgepipe plan TARGET --help``: the options, then a pipeline file's parameters (an option
    of ``plan`` with the flag of one of them is left out: there, the flag is the pipeline's)."""
    from edgepipe.cli import params_help as cli_params

    parser = argparse.ArgumentParser(prog="edgepipe plan", description=DESCRIPTION, allow_abbrev=False)
    _add_arguments(parser, _pipeline_flags(args.target))
    pipeline = args.target if args.target is not None and args.target.endswith(PIPELINE_SUFFIX) else None
    return cli_params.print_help(parser, pipeline, _reserved())


def _list(args: argparse.Namespace, table: dict[str, Any]) -> int:
    if args.format == "json":
        print_json([dataclasses.asdict(d) for d in table.values()])
        return EXIT_OK
    from edgepipe.deploy.output import console
    from edgepipe.deploy.output import table as make_table

    rows = [
        (d.name, d.bandwidth_gb_s, d.compute_tops or "-", d.ram_gb, ", ".join(d.unsure) or "-",
         ", ".join(d.ops_targets) + (" (host only)" if d.ops_note else ""))
        for d in table.values()
    ]  # fmt: skip
    console().print(
        make_table(
            "devices (figures marked unsure are derived: see each file's source)",
            ("name", "GB/s", "TOPS", "RAM GB", "unsure", "check-ops --target"),
            rows,
            right=("GB/s", "TOPS", "RAM GB"),
        )
    )
    return EXIT_OK


def _plan(args: argparse.Namespace, extra: list[str], is_pipeline: bool) -> int:
    from edgepipe.cli import memory_plan
    from edgepipe.core.errors import EdgepipeError
    from edgepipe.deploy.plan import device_plan as planning
    from edgepipe.deploy.plan.decode import CODECS, DEFAULT_CODEC, parse_resolution
    from edgepipe.deploy.plan.pipeline import StreamsWanted
    from edgepipe.deploy.plan.text import closing, render

    if args.params is not None:
        from edgepipe.deploy.files import check_input

        check_input(
            args.params, f"--params {args.params}", give="give a TOML file of the pipeline's parameters"
        )
    codec = CODECS.get(args.codec.lower()) if args.codec is not None else None
    if args.codec is not None and codec is None:
        raise ValueError(f"--codec: unknown codec {args.codec!r}; use one of {', '.join(CODECS)}")
    width = height = None
    if args.resolution is not None:
        try:
            width, height = parse_resolution(args.resolution)
        except ValueError as exc:
            raise ValueError(f"--resolution {args.resolution}: {exc}") from None
    target = _target(args)
    wanted = StreamsWanted(args.streams, width, height, args.fps, codec) if args.streams else None
    streams = [wanted.streams(None)] if wanted is not None else []
    notes: list[str] = []
    try:
        if is_pipeline:
            from edgepipe.deploy.plan.pipeline import load_graph, plan_pipeline

            graph = load_graph(args.target, extra, _reserved(), args.params)
            report, models, streams, notes = plan_pipeline(
                graph, target, args.tokens_per_s, args.sequences, codec or DEFAULT_CODEC, wanted
            )
        else:
            models = _models(args, target)
            memory = planning.memory_plan(target)
            for m in models:
                planning.reserve_model(memory, m.model, m.owner, m.kv, m.sequences)
            planning.reserve_streams(memory, streams)
            report = planning.report_of(memory, "plan", [m.owner for m in models])
    except EdgepipeError as exc:
        if args.debug:
            raise
        error(str(exc))  # a missing model, not a decoder, a wrong pipeline file or parameter
        return EXIT_USAGE
    result = planning.build(target, models, report, streams)
    if args.format == "json":
        print_json(planning.as_dict(result) | {"notes": notes})
    else:
        print("\n".join(render(result, notes)))
        memory_plan.print_plan(report)
        print("\n".join(closing(result)))
    if report.failures:
        return EXIT_PROBLEMS
    return EXIT_OK if result.fits else EXIT_PROBLEMS


def _pick(flag: float | None, table: float | None) -> float | None:
    return flag if flag is not None else table


def _target(args: argparse.Namespace) -> Any:
    from edgepipe.deploy.plan.device_plan import Target
    from edgepipe.deploy.plan.devices import find_device

    device = find_device(args.device) if args.device is not None else None
    return Target(
        name=device.name if device else "the flags' device",
        bandwidth_gb_s=_pick(args.bandwidth_gb_s, device.bandwidth_gb_s if device else None),
        tops=_pick(args.tops, device.compute_tops if device else None),
        ram_gb=_pick(args.ram_gb, device.ram_gb if device else None),
        device=device,
    )


def _models(args: argparse.Namespace, target: Any) -> list[Any]:
    from pathlib import Path

    from edgepipe.deploy.plan.capacity import DTYPE_BYTES, ModelFacts
    from edgepipe.deploy.plan.device_plan import model_plan
    from edgepipe.deploy.plan.model import cache_positions, read_model

    if args.target is not None:
        if args.param_count is not None:
            raise ValueError("give a model file or --param-count, not both")
        facts = read_model(Path(args.target))
        if args.dtype is not None:  # planned as if quantized to it
            facts = dataclasses.replace(
                facts,
                dtype=args.dtype,
                weight_bytes=int(facts.params * DTYPE_BYTES[args.dtype]),
                formats=((args.dtype, facts.params),),
                packed_params=0,
            )
        positions = cache_positions(Path(args.target), args.max_seq_len)
    elif args.param_count is not None:
        facts = ModelFacts.from_count(
            args.param_count,
            args.dtype or "fp16",
            layers=args.layers,
            kv_heads=args.kv_heads,
            head_dim=args.head_dim,
            heads=args.heads,
        )
        positions = args.max_seq_len or 2048
    else:
        if args.streams:
            return []
        raise ValueError(
            "nothing to plan: give --param-count N, a model (file or folder), a pipeline file, or --streams N"
        )
    return [model_plan(facts, "model", target, args.tokens_per_s, positions, args.sequences)]


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: edgepipe plan ...")
