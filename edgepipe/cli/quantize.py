"""``edgepipe quantize``: static INT8 (QDQ) of a detector, calibrated on real frames, checked
against FP32 on held-out frames (see :mod:`edgepipe.deploy.quantize.static`); or weight-only 4-
or 8-bit of a language model's folder, checked against its source on prompts (see
:mod:`edgepipe.deploy.quantize.decoder` and :mod:`.agreement`).

    edgepipe quantize centerface --calib clip.mp4
    edgepipe quantize model.onnx --calib frames/ -o model.int8.onnx --exclude Sigmoid
    edgepipe quantize models/tiny-lm --bits 4 -o models/tiny-lm-int4

A folder without ``--calib`` (or any of the language-model options) takes the language-model
path. Exit 0: written, and it agrees with the source (``--min-agreement``: the detections
matched; for a language model the next token the same); 1: written, but it does not, or the
work failed; 2: the command line or an input is wrong (not a decoder, already quantized, an
output that exists ...: nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.progress import Progress, TaskID

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.core.units import number, whole
from edgepipe.deploy.output import (
    INPUT_SIDE,
    add_format,
    console,
    print_json,
    progress,
    require,
    table,
)

DEFAULT_MIN_AGREEMENT = 0.9
_SHARE = number("a number from 0 to 1", at_least=0, at_most=1)
_LM = "language model: "


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "quantize",
        help="static INT8 of a detector, or 4/8-bit weights of a language model, checked against the source",
        description=(
            "Quantize a detection model to INT8 (QDQ, onnxruntime.quantization), calibrated on "
            "frames of a video or a folder of images through the Detector's own preprocessing, "
            "then compare FP32 and INT8 on other frames of the same input: error per output, "
            "detections that agree (IoU), size and latency. Or, given a language model's folder "
            "(model.onnx with past key values, tokenizer.json), write a new folder with its "
            "weights in 4 or 8 bits (ONNX Runtime's MatMulNBits) and compare it with the source "
            "on prompts: logit cosine and the next token chosen, position by position. Needs the "
            "deploy extra (the onnx package): without it, the error names the command that installs it."
        ),
    )
    p.add_argument(
        "model",
        help="an .onnx file, a folder holding one, or a registry name (centerface); "
        "or a language model's folder",
    )
    p.add_argument("--calib", metavar="VIDEO|DIR", help="a video, or a folder of images (required)")
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="the INT8 model (default: MODEL.int8.onnx next to the model, or here for a registry name); "
        "for a language model the folder to write (default: FOLDER-int4 or -int8 beside it)",
    )
    p.add_argument("--force", action="store_true", help="replace the output if it exists")
    p.add_argument("--frames", type=whole(1), default=16, metavar="N", help="calibration frames (default 16)")
    p.add_argument(
        "--held-out",
        type=whole(1),
        default=8,
        metavar="N",
        help="other frames for the FP32/INT8 check (default 8)",
    )
    p.add_argument(
        "--exclude",
        nargs="+",
        default=[],
        metavar="NODE_OR_OP",
        help="nodes (by name) or operator types (Sigmoid) to keep in FP32",
    )
    p.add_argument(
        "--per-tensor", action="store_true", help="one weight scale per tensor (default: per channel)"
    )
    p.add_argument(
        "--weight-bits", choices=("auto", "7", "8"), default="auto",
        help="auto (default): 7 on an x86 CPU without VNNI, where 8-bit products saturate; else 8",
    )  # fmt: skip
    p.add_argument(
        "--method",
        choices=("minmax", "entropy", "percentile"),
        default="minmax",
        help="calibration method (default minmax)",
    )
    p.add_argument(
        "--input-size",
        type=INPUT_SIDE,
        default=640,
        metavar="PX",
        help="longest input side, for a model that takes any size (default 640, as the Detector)",
    )
    p.add_argument("--iou", type=_SHARE, default=0.5, help="overlap for a detection to agree (default 0.5)")
    p.add_argument(
        "--min-agreement",
        type=_SHARE,
        metavar="SHARE",
        help="FP32 detections that must have an INT8 match, else exit 1 (default 0.9); for a language "
        "model, positions whose next token is the source's (default 0.3)",
    )
    p.add_argument(
        "--list-nodes", action="store_true", help="list the model's nodes (for --exclude) and exit"
    )
    p.add_argument(
        "--adapter",
        default="auto",
        metavar="FAMILY",
        help="the detector family whose outputs to decode: centerface, yolov5, yolov8, yolo-nms, ssd "
        "(default auto: the registry's, or read from the outputs)",
    )
    p.add_argument("--bits", type=int, choices=(4, 8), help=_LM + "weight bits (default 4)")
    p.add_argument(
        "--block",
        type=whole(16),
        metavar="N",
        help=_LM + "weights per block, each with its own scale: a power of two (default 32)",
    )
    p.add_argument(
        "--accuracy-level",
        type=whole(0, 4),
        metavar="N",
        help=_LM + "MatMulNBits compute: 4 int8 (fastest on CPUs, the default), 0 as the input",
    )
    p.add_argument(
        "--keep",
        metavar="lm_head,embed",
        help=_LM + "ends kept in float32: lm_head, embed, both, or none (default embed)",
    )
    p.add_argument(
        "--prompts",
        metavar="FILE",
        help=_LM + "a text file, one prompt a line, for the check (default: 4 built in)",
    )
    p.add_argument(
        "--min-cosine",
        type=number("a number from -1 to 1", at_least=-1, at_most=1),
        metavar="X",
        help=_LM + "mean logit cosine with the source, else exit 1 (default 0.9)",
    )
    p.add_argument(
        "--positions",
        type=whole(1),
        metavar="N",
        help=_LM + "next-token predictions compared per prompt (default 32)",
    )
    p.add_argument("--debug", action="store_true", help="full tracebacks")
    add_format(p)  # fmt: skip


def main(args: argparse.Namespace) -> int:
    require("onnx", "deploy", "edgepipe quantize")
    from edgepipe.core.errors import os_reason
    from edgepipe.deploy.files import PathError, check_input, check_output
    from edgepipe.deploy.quantize.calib import CalibError
    from edgepipe.deploy.quantize.decoder import is_decoder_folder
    from edgepipe.deploy.quantize.lm_output import lm_options_given
    from edgepipe.deploy.quantize.model import ModelChoiceError, default_output, find_model
    from edgepipe.deploy.quantize.static import QuantizeOptions, quantize
    from edgepipe.infer.errors import InferError
    from edgepipe.vision.adapters import ADAPTERS, AdapterError

    # A folder without frames is a language model's, and one that holds a decoder, with them too.
    folder = Path(args.model).expanduser()
    in_folder = os.path.isdir(folder) and not args.list_nodes
    if lm_options_given(args) or (in_folder and (not args.calib or is_decoder_folder(folder))):
        return _run_lm(args)
    if args.adapter != "auto" and args.adapter not in ADAPTERS:
        error(f"--adapter {args.adapter}: use auto or one of {', '.join(ADAPTERS)}")
        return EXIT_USAGE
    try:
        source = find_model(args.model)
    except (ModelChoiceError, InferError) as exc:
        error(str(exc))
        return EXIT_USAGE
    if args.list_nodes:
        try:
            return _list_nodes(source, args.format)
        except ModelChoiceError as exc:  # not an ONNX model after all
            error(str(exc))
            return EXIT_USAGE
    if not args.calib:
        error("quantize needs calibration frames: --calib VIDEO or --calib FOLDER_OF_IMAGES")
        return EXIT_USAGE
    try:
        calib = check_input(args.calib, f"--calib {args.calib}", folder=True,
                            give="give a video or a folder of images")  # fmt: skip
        output = Path(args.output).expanduser() if args.output else default_output(source, Path())
        if _same_file(output, source.path):
            raise PathError(f"-o {output}: is the model itself; write the INT8 model elsewhere")
        output = check_output(output, "-o", force=args.force)
    except PathError as exc:
        error(str(exc))
        return EXIT_USAGE
    options = QuantizeOptions(
        calibration_frames=args.frames, held_out_frames=args.held_out, exclude=tuple(args.exclude),
        per_channel=not args.per_tensor, method=args.method, input_size=args.input_size, iou=args.iou,
        reduce_range=None if args.weight_bits == "auto" else args.weight_bits == "7",
        adapter=args.adapter,
    )  # fmt: skip
    with progress("calibrating", args.frames) as bar:
        steps = _Steps(bar, args.held_out)
        try:
            report = quantize(source, output, calib, options, calibrating=steps.calibrating,
                              checking=steps.checking)  # fmt: skip
        except (CalibError, ModelChoiceError) as exc:
            error(str(exc))
            return EXIT_USAGE
        except AdapterError as exc:
            error(f"{source.name}: quantize takes a detector whose outputs edgepipe decodes (the check "
                  f"compares detections); name its family with --adapter ({exc})")  # fmt: skip
            return EXIT_USAGE
        except InferError as exc:
            error(str(exc))
            return EXIT_USAGE
        except OSError as exc:  # the disk filled, the folder went away ...
            error(f"{exc.filename or output}: {os_reason(exc)}"
                  + (" (nothing written: the INT8 model is written whole or not at all)"
                     if exc.filename == str(output) else ""))  # fmt: skip
            return EXIT_FAILED
    agreement = report.check.agreement
    share = agreement.share if agreement is not None else None
    min_agreement = DEFAULT_MIN_AGREEMENT if args.min_agreement is None else args.min_agreement
    ok = share is not None and share >= min_agreement  # unmeasured is not agreed
    if args.format == "json":
        data = report.to_dict()
        data["min_agreement"] = min_agreement
        data["ok"] = ok
        print_json(data)
    else:
        _print(report, min_agreement)
    if share is None:
        error(f"FP32 found nothing in the held-out frames of {args.calib}, so the INT8 model's "
              f"detections could not be checked (it is written all the same): calibrate with frames "
              f"that show what the model detects")  # fmt: skip
        return EXIT_PROBLEMS
    if not ok:
        error(f"INT8 detections agree with FP32 on {share:.0%} < {min_agreement:.0%}: "
              "try more --frames, --method entropy, or --exclude the layers that drift")  # fmt: skip
        return EXIT_PROBLEMS
    return EXIT_OK


def _run_lm(args: argparse.Namespace) -> int:
    """A language model's folder: quantized, checked on prompts, printed; the exit code."""
    from edgepipe.core.errors import os_reason
    from edgepipe.deploy.quantize import lm_output as lm
    from edgepipe.deploy.quantize.agreement import PROMPTS, agreement
    from edgepipe.deploy.quantize.decoder import (
        DecoderQuantError,
        check_destination,
        check_options,
        decoder_layout,
        default_destination,
        quantize_decoder,
    )

    require("onnx_ir", "deploy", "edgepipe quantize (a language model)")
    folder = Path(args.model).expanduser()
    bits = args.bits or lm.DEFAULT_BITS
    block = args.block or lm.DEFAULT_BLOCK
    level = lm.DEFAULT_ACCURACY_LEVEL if args.accuracy_level is None else args.accuracy_level
    keep = lm.parse_keep(args.keep)
    positions = args.positions or lm.DEFAULT_POSITIONS
    floor = lm.DEFAULT_MIN_AGREEMENT if args.min_agreement is None else args.min_agreement
    min_cosine = lm.DEFAULT_MIN_COSINE if args.min_cosine is None else args.min_cosine
    output = Path(args.output).expanduser() if args.output else default_destination(folder, bits)
    try:
        if not folder.is_dir():
            given = lm.lm_options_given(args)
            raise DecoderQuantError(
                f"{args.model}: not a folder; {' '.join(given)} {'is' if len(given) == 1 else 'are'} for "
                "a language model's folder (model.onnx and tokenizer.json); a detector takes --calib VIDEO"
            )
        if args.calib:
            raise DecoderQuantError(
                f"--calib {args.calib}: {folder} is a language model's folder; its check runs on "
                "prompts (--prompts FILE), not frames"
            )
        check_options(bits, block, keep)
        decoder_layout(folder)
        check_destination(folder, output, force=args.force)
        prompts = lm.read_prompts(args.prompts) if args.prompts else list(PROMPTS)
    except DecoderQuantError as exc:
        error(str(exc))
        return EXIT_USAGE
    with progress(f"quantizing {folder.name} to int{bits}", None) as bar:
        try:
            summary = quantize_decoder(folder, output, bits, block, level, keep, force=args.force)
        except DecoderQuantError as exc:
            error(str(exc))
            return EXIT_USAGE
        except OSError as exc:  # the disk filled ...
            error(f"{exc.filename or output}: {os_reason(exc)} (nothing written: the folder is "
                  "written whole or not at all)")  # fmt: skip
            return EXIT_FAILED
        bar.reset(TaskID(0), total=len(prompts), description="checking against the source")
        figures = agreement(folder, output, prompts, positions, advance=lambda: bar.advance(TaskID(0)))
    short = lm.problems(figures, floor, min_cosine)
    if args.format == "json":
        data: dict[str, Any] = summary.to_dict()
        data["agreement"] = figures.to_dict()
        data["min_agreement"] = floor
        data["min_cosine"] = min_cosine
        data["ok"] = not short
        print_json(data)
    else:
        lm.print_lm(summary, figures, short)
    if short:
        error(f"the int{bits} model strays from the source: {'; '.join(short)} (it is written all the "
              "same): try --bits 8, a smaller --block, or --keep lm_head,embed")  # fmt: skip
        return EXIT_PROBLEMS
    return EXIT_OK


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # not there (or a name too long: check_output says so)
        return False


class _Steps:
    """One bar: the calibration frames, then the held-out frames checked."""

    def __init__(self, bar: Progress, held_out: int) -> None:
        self.bar = bar
        self.held_out = held_out
        self.checked = 0

    def calibrating(self) -> None:
        self.bar.advance(TaskID(0))

    def checking(self) -> None:
        if not self.checked:
            self.bar.reset(TaskID(0), total=self.held_out, description="checking FP32 vs INT8")
        self.checked += 1
        self.bar.advance(TaskID(0))


def _list_nodes(source: Any, fmt: str) -> int:
    import tempfile

    from edgepipe.deploy.quantize.model import node_table, prepare

    with tempfile.TemporaryDirectory() as work:
        rows = node_table(prepare(source, Path(work) / "m.onnx", per_channel=False))
    if fmt == "json":
        print_json([{"name": n, "op_type": o, "outputs": out} for n, o, out in rows])
    else:
        console().print(table(f"{source.name}: {len(rows)} nodes", ("node", "operator", "outputs"), rows))
    return EXIT_OK


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"


def _print(report: Any, min_agreement: float) -> None:
    c = report.check
    out = console()
    shape = "x".join(str(d) for d in report.input_shape)
    print(f"{report.model} -> {report.output} (INT8 QDQ, {report.calibration_frames} calibration frames "
          f"of {report.calibration}, input {shape})")  # fmt: skip
    if report.excluded:
        print(f"kept in FP32: {', '.join(report.excluded)}")
    rows = [("size", _size(report.fp32_bytes), _size(report.int8_bytes),
             f"{report.int8_bytes / report.fp32_bytes:.2f}x"),
            ("latency (median)", f"{c.fp32_ms:.1f} ms", f"{c.int8_ms:.1f} ms",
             f"{c.int8_ms / c.fp32_ms:.2f}x" if c.fp32_ms else "-")]  # fmt: skip
    if c.prepared_ms:
        rows.append(("latency, FP32 pre-processed", f"{c.prepared_ms:.1f} ms", f"{c.int8_ms:.1f} ms",
                     f"{c.int8_ms / c.prepared_ms:.2f}x"))  # fmt: skip
    out.print(table(None, ("", "FP32", "INT8", "INT8/FP32"), rows, right=("FP32", "INT8", "INT8/FP32")))
    errors = [(o.name, f"{o.mean_abs:.4g}", f"{o.max_abs:.4g}", f"{o.fp32_mean_abs:.4g}") for o in c.outputs]
    columns = ("output", "mean abs", "max abs", "FP32 mean |x|")
    out.print(table(f"error on {c.frames} held-out frames", columns, errors, right=columns[1:]))
    a = c.agreement
    if a is None or a.share is None:
        print("detections: FP32 found none on the held-out frames; agreement not measured")
        return
    verdict = "ok" if a.share >= min_agreement else f"below {min_agreement:.0%}"
    print(f"detections: {a.matched} of {a.fp32_detections} FP32 detections have an INT8 match "
          f"(IoU > {a.iou:g}): {a.share:.0%}, {verdict}; INT8 found {a.int8_detections}")  # fmt: skip
    sys.stdout.flush()
