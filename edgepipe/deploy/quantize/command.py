"""``edgepipe quantize``: static INT8 (QDQ) of a detector, calibrated on real frames, checked
against FP32 on held-out frames (see :mod:`edgepipe.deploy.quantize.static`).

    edgepipe quantize centerface --calib clip.mp4
    edgepipe quantize model.onnx --calib frames/ -o model.int8.onnx --exclude Sigmoid

Exit 0: written, and the INT8 detections agree with FP32 (``--min-agreement``); 1: written, but
they do not, or the work failed; 2: the command line or an input is wrong (nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.progress import Progress, TaskID

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.core.units import number, whole
from edgepipe.deploy.output import (
    INPUT_SIDE,
    add_format,
    console,
    error,
    print_json,
    progress,
    require,
    table,
)

DEFAULT_MIN_AGREEMENT = 0.9
_SHARE = number("a number from 0 to 1", at_least=0, at_most=1)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "quantize",
        help="static INT8 (QDQ) of a detector, calibrated on real frames, checked against FP32",
        description=(
            "Quantize a detection model to INT8 (QDQ, onnxruntime.quantization), calibrated on "
            "frames of a video or a folder of images through the Detector's own preprocessing, "
            "then compare FP32 and INT8 on other frames of the same input: error per output, "
            "detections that agree (IoU), size and latency. Needs the deploy extra: "
            "pip install 'edgepipe[deploy]'."
        ),
    )
    p.add_argument("model", help="an .onnx file, a folder holding one, or a registry name (centerface)")
    p.add_argument("--calib", metavar="VIDEO|DIR", help="a video, or a folder of images (required)")
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="the INT8 model (default: MODEL.int8.onnx next to the model, or here for a registry name)",
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
        default=DEFAULT_MIN_AGREEMENT,
        metavar="SHARE",
        help="FP32 detections that must have an INT8 match, else exit 1 (default 0.9)",
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
    p.add_argument("--debug", action="store_true", help="full tracebacks")
    add_format(p)  # fmt: skip


def main(args: argparse.Namespace) -> int:
    require("onnx", "deploy", "edgepipe quantize")
    from edgepipe.core.errors import os_reason
    from edgepipe.deploy.files import PathError, check_input, check_output
    from edgepipe.deploy.quantize.calib import CalibError
    from edgepipe.deploy.quantize.model import ModelChoiceError, default_output, find_model
    from edgepipe.deploy.quantize.static import QuantizeOptions, quantize
    from edgepipe.infer.errors import InferError
    from edgepipe.vision.adapters import ADAPTERS, AdapterError

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
    ok = share is not None and share >= args.min_agreement  # unmeasured is not agreed
    if args.format == "json":
        data = report.to_dict()
        data["min_agreement"] = args.min_agreement
        data["ok"] = ok
        print_json(data)
    else:
        _print(report, args.min_agreement)
    if share is None:
        error(f"FP32 found nothing in the held-out frames of {args.calib}, so the INT8 model's "
              f"detections could not be checked (it is written all the same): calibrate with frames "
              f"that show what the model detects")  # fmt: skip
        return EXIT_PROBLEMS
    if not ok:
        error(f"INT8 detections agree with FP32 on {share:.0%} < {args.min_agreement:.0%}: "
              "try more --frames, --method entropy, or --exclude the layers that drift")  # fmt: skip
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
