"""``edgepipe compare``: one model on two execution providers, or two model files (FP32 and
INT8), fed the same inputs; divergence per output and a verdict (see :mod:`edgepipe.deploy.compare.drift`).

    edgepipe compare model.onnx --ep cpu --ep cuda
    edgepipe compare model.onnx model.int8.onnx --input clip.mp4 --atol 0.5 --rtol 0.5

Exit 0: every output within tolerance; 1: an output diverges (or the work failed); 2: the
command line or an input is wrong, or a provider asked for is not in this ONNX Runtime.
"""

from __future__ import annotations

import argparse
from typing import Any

from edgepipe.cli.exits import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.core.units import number, whole
from edgepipe.deploy.output import INPUT_SIDE, add_format, console, print_json, progress, table

RUN_TIMEOUT_S = 120.0
_TOLERANCE = number("a number of at least 0", at_least=0)


def add_parser(sub: Any) -> None:
    from edgepipe.deploy.compare.drift import ATOL, RTOL

    p = sub.add_parser(
        "compare",
        help="the same inputs through two providers or two model files: divergence per output",
        description=(
            "Run the same inputs through a model on two execution providers (--ep cpu --ep cuda) "
            "or through two model files (FP32 and INT8), and report per output the max and mean "
            "absolute error, the relative error and the cosine similarity, with a verdict: exit "
            "1 when any element is past atol + rtol * |A| (A, the first side, is the reference)."
        ),
    )
    p.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="one model (with two --ep) or two (an .onnx file, a folder, a registry name)",
    )
    p.add_argument(
        "--ep",
        action="append",
        default=[],
        metavar="PROVIDER",
        help="execution provider of a side (cpu, cuda, tensorrt, openvino …); default cpu",
    )
    p.add_argument(
        "--input",
        metavar="VIDEO|DIR",
        help="feed frames of this video or folder of images (a detector) instead of random tensors",
    )
    p.add_argument("--samples", type=whole(1), default=3, metavar="N", help="inputs to feed (default 3)")
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="[NAME=]DIMS",
        help="shape of an input's random tensor, e.g. 1x3x192x320 (free dims default: 1, then 64)",
    )
    p.add_argument(
        "--input-size",
        type=INPUT_SIDE,
        default=640,
        metavar="PX",
        help="with --input: longest input side for a model that takes any size (default 640)",
    )
    p.add_argument("--atol", type=_TOLERANCE, default=ATOL, help=f"absolute tolerance (default {ATOL:g})")
    p.add_argument("--rtol", type=_TOLERANCE, default=RTOL, help=f"relative tolerance (default {RTOL:g})")
    p.add_argument("--seed", type=whole(0), default=0, metavar="N",
                   help="of the random inputs: a whole number of at least 0 (default 0)")  # fmt: skip
    p.add_argument("--debug", action="store_true", help="full tracebacks")
    add_format(p)  # fmt: skip


def _sides(models: list[str], eps: list[str]) -> list[tuple[str, str]]:
    """(model, provider) of side A and side B; ValueError when the command line names no pair."""
    if len(models) > 2 or len(eps) > 2:
        raise ValueError(
            "compare takes two sides: one model with two --ep, or two models (one --ep each at most)"
        )
    if len(models) == 1:
        if len(eps) != 2:
            raise ValueError(f"one model needs two providers to compare, e.g. edgepipe compare {models[0]} "
                             "--ep cpu --ep cuda; or give two model files")  # fmt: skip
        return [(models[0], eps[0]), (models[0], eps[1])]
    chosen = eps or ["cpu"]
    return [(models[0], chosen[0]), (models[1], chosen[-1])]


def main(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    from edgepipe.deploy.compare.drift import Comparison, compare
    from edgepipe.deploy.compare.inputs import InputError, frame_feeds, parse_shapes, random_feeds
    from edgepipe.deploy.files import PathError, check_input
    from edgepipe.deploy.quantize.model import ModelChoiceError, find_model
    from edgepipe.infer import Session, SessionConfig
    from edgepipe.infer.errors import InferError
    from edgepipe.infer.providers import full_name, short_name

    try:
        sides = _sides(args.models, args.ep)
    except ValueError as exc:
        error(str(exc))
        return EXIT_USAGE
    available = ort.get_available_providers()
    for _, ep in sides:
        if full_name(ep) not in available:
            have = ", ".join(short_name(p) for p in available)
            error(f"--ep {ep}: this ONNX Runtime has no {full_name(ep)} (available here: {have})")
            return EXIT_USAGE
    if args.input:
        try:
            video = check_input(args.input, f"--input {args.input}", folder=True, give="give a video or "
                                "a folder of images, or leave --input out for random inputs")  # fmt: skip
        except PathError as exc:
            error(str(exc))
            return EXIT_USAGE
    sessions = []
    feeds: list[dict[str, Any]] = []
    try:
        for model, ep in sides:
            source = find_model(model)
            config = SessionConfig(providers=(ep,), cache_optimized=False, timeout_s=None,
                                   free_image_dims=source.free_image_dims)  # fmt: skip
            session = Session(source.path, config, name=source.name)
            sessions.append((source, session))
            if session.providers[0] != full_name(ep):
                error(f"--ep {ep}: {source.name} could not start on {full_name(ep)} (it fell back to "
                      f"{session.providers[0]}); see the warning above")  # fmt: skip
                return EXIT_USAGE
        (source_a, a), (_, b) = sessions
        if [i.name for i in a.inputs] != [i.name for i in b.inputs]:
            error(f"the two models do not take the same inputs: A {_io(a)}; B {_io(b)}")
            return EXIT_USAGE
        if sorted(a.output_names) != sorted(b.output_names):
            error(f"the two models do not give the same outputs: A {list(a.output_names)}; "
                  f"B {list(b.output_names)}; compare two versions of one model")  # fmt: skip
            return EXIT_USAGE
        labels = (
            f"{sides[0][0]} on {short_name(a.providers[0])}",
            f"{sides[1][0]} on {short_name(b.providers[0])}",
        )
        if args.input:
            feeds = frame_feeds(
                video, str(source_a.path), source_a.free_image_dims, args.samples, args.input_size
            )
            what = f"{len(feeds)} frames of {video.name}"
        else:
            shapes = parse_shapes(args.shape, a.inputs)
            feeds = list(random_feeds(a.inputs, shapes, args.samples, args.seed))
            what = f"{len(feeds)} random inputs (seed {args.seed})"
        comparison = Comparison(labels, what, atol=args.atol, rtol=args.rtol)
        with progress("comparing", len(feeds)) as bar:

            def run(session: Any) -> Any:
                # Both sides' outputs in A's order (paired by name, whatever order B lists them).
                return lambda feed: session.run(feed, a.output_names, timeout_s=RUN_TIMEOUT_S)

            def each() -> Any:
                for feed in feeds:
                    yield feed
                    bar.advance(bar.task_ids[0])

            compare(run(a), run(b), each(), a.output_names, comparison)
    except (ModelChoiceError, InputError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except InferError as exc:
        hint = ""
        if feeds and not args.input:  # the shapes were made up here: say which, and how to choose
            fed = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in feeds[0].items())
            hint = f" (random inputs {fed}; give --shape [NAME=]DIMS that the model takes)"
        error(f"{exc}{hint}")
        return EXIT_USAGE if not sessions or len(sessions) < 2 else EXIT_PROBLEMS
    finally:
        for _, session in sessions:
            session.close()
    if args.format == "json":
        print_json(comparison.to_dict())
    else:
        _print(comparison)
    if not comparison.ok:
        bad = ", ".join(d.name for d in comparison.outputs if not d.ok)
        error(f"the outputs diverge ({bad}) past atol {args.atol:g} + rtol {args.rtol:g} x |A|")
        return EXIT_PROBLEMS
    return EXIT_OK


def _io(session: Any) -> str:
    return f"inputs {[i.name for i in session.inputs]}"


def _print(c: Any) -> None:
    print(f"A: {c.sides[0]}\nB: {c.sides[1]}\n{c.inputs}; tolerance |B - A| <= {c.atol:g} + {c.rtol:g} x |A|")
    rows = []
    for d in c.outputs:
        verdict = d.mismatch or ("ok" if d.ok else f"{d.outside} of {d.elements} outside")
        figures = ("-",) * 4 if d.mismatch else (
            f"{d.max_abs:.3g}", f"{d.mean_abs:.3g}", f"{d.rel_error:.3g}", f"{d.cosine:.6f}")  # fmt: skip
        rows.append((d.name, "x".join(map(str, d.shape)), *figures, verdict))
    columns = ("output", "shape", "max abs", "mean abs", "rel error", "cosine", "verdict")
    console().print(table(None, columns, rows, right=columns[2:6]))
    print("verdict: " + ("the outputs agree" if c.ok else "DIVERGED"))
