"""``edgepipe check-ops``: a model's operators against a target's support table.

    edgepipe check-ops centerface --target rknn
    edgepipe check-ops ./model.onnx --target cuda --format json

MODEL is an .onnx file, a folder with ``model.onnx``, or a registry name already fetched
(``edgepipe models pull NAME``). Where the target's ONNX Runtime provider is installed here, a
session is made and the provider each node got is read back (``--no-session`` skips it).
Exit 0: every operator is supported (and, where confirmed, placed on the target); 1: some are
not; 2: the command line, the model or the target is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from edgepipe.cli.exits import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.deploy.output import add_format, print_json


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "check-ops",
        help="a model's operators against a target's support table (cpu, cuda, tensorrt, rknn ...)",
        description="The model's operators (domain, opset, count; If/Loop/Scan bodies included) "
        "against the target's operator support table, with what to do about each one it lacks and "
        "what a fallback costs; where the target's ONNX Runtime provider is installed, the "
        "placement ONNX Runtime really makes. Exit 0: all supported; 1: some are not; 2: a wrong "
        "model or target.",
        allow_abbrev=False,
    )
    p.add_argument("model", metavar="MODEL", help="model.onnx, a folder with model.onnx, or a registry name")
    p.add_argument(
        "--target",
        required=True,
        metavar="NAME",
        help="cpu, cuda, tensorrt, openvino, qnn, coreml, rknn (a device of edgepipe plan's table: the "
        "error names its tables)",
    )
    p.add_argument(
        "--no-session", action="store_true", help="do not create an ONNX Runtime session to confirm"
    )
    p.add_argument("--debug", action="store_true", help="full tracebacks")
    add_format(p)


def _model_file(model: str) -> tuple[str, Path]:
    """(name to show, .onnx file); ValueError with the one-line message otherwise."""
    from edgepipe.deploy.files import check_model
    from edgepipe.infer import registry
    from edgepipe.infer.errors import ModelNotFound

    path = Path(model).expanduser()
    if os.path.isdir(path):  # False, not OSError, for a name too long: check_model says why
        file = path / "model.onnx"
        if not os.path.lexists(file):
            raise ValueError(f"model {model}: a folder without model.onnx; pass the .onnx file itself")
        return model, check_model(file, f"model {file}", give="pass the .onnx file itself")
    if os.path.lexists(path) or registry.looks_like_path(model):
        return model, check_model(
            path, f"model {model}", give="pass an .onnx file, a folder or a registry name"
        )
    try:
        return model, registry.resolve(model, pull_missing=False).path
    except ModelNotFound as exc:
        raise ValueError(str(exc)) from None


def _table(target: str) -> Any:
    """The table of ``target``; :class:`UnknownTarget` otherwise, which for the name of a device
    of ``edgepipe plan``'s table (or a part of one: ``hailo``) says which tables its models run
    on, or what checks a model for an accelerator that has none."""
    from edgepipe.deploy.check_ops.tables import UnknownTarget, find_table, tables
    from edgepipe.deploy.plan.devices import devices_named

    try:
        return find_table(target)
    except UnknownTarget as exc:
        named = devices_named(target)
        if not named:
            raise
        known = ", ".join(tables())
        notes = list(dict.fromkeys(d.ops_note for d in named if d.ops_note))
        if notes:
            where = ", ".join(d.name for d in named if d.ops_note)
            raise UnknownTarget(f"--target {target} ({where}): {'; '.join(notes)}; tables: {known}") from None
        targets = list(dict.fromkeys(t for d in named for t in d.ops_targets))
        if not targets:
            raise exc from None
        shown = ", ".join(d.name for d in named[:3]) + (" ..." if len(named) > 3 else "")
        raise UnknownTarget(
            f"--target {target} names a device ({shown}), not a table: its models run on "
            f"--target {' or --target '.join(targets)}; tables: {known}"
        ) from None


def main(args: argparse.Namespace) -> int:
    from edgepipe.deploy.check_ops.tables import UnknownTarget
    from edgepipe.infer.onnxfile import OnnxFormatError

    try:
        table = _table(args.target)
        name, file = _model_file(args.model)
        from edgepipe.deploy.check_ops.check import check, read_nodes

        opsets, nodes = read_nodes(file)
    except (UnknownTarget, ValueError, OSError, OnnxFormatError) as exc:
        if args.debug:
            raise
        message = (
            str(exc) if not isinstance(exc, (OSError, OnnxFormatError)) else f"model {args.model}: {exc}"
        )
        if isinstance(exc, OnnxFormatError):
            message += " (not an ONNX model?)"
        error(message)
        return EXIT_USAGE
    result = check(name, opsets, nodes, table)
    placed = None
    if not args.no_session:
        from edgepipe.deploy.check_ops.placement import placement
        from edgepipe.deploy.output import progress

        with progress(f"loading {name} on {table.provider or table.target}", None):  # a large model: seconds
            placed = placement(file, table.provider)
    from edgepipe.deploy.check_ops.text import as_dict, render

    off_target = placed.off_target(table.provider) if placed is not None and placed.confirmed else {}
    if args.format == "json":
        print_json(as_dict(result, os.fspath(file), placed))
    else:
        render(result, os.fspath(file), placed)
    return EXIT_PROBLEMS if result.unsupported or off_target else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: edgepipe check-ops ...")
