"""Static INT8 quantization of a detector (QDQ, ``onnxruntime.quantization``), calibrated on
real frames through the Detector's own preprocessing, then checked against FP32 on held-out
frames (:mod:`.quantize_check`).

Choices, for a detector on an edge CPU or accelerator:

- QDQ format (QuantizeLinear/DequantizeLinear pairs around each quantized operator): what
  ONNX Runtime's CPU, CUDA/TensorRT, QNN and OpenVINO providers read; activations uint8 and
  weights int8 (U8S8, ONNX Runtime's advice for x86 CPUs), weights per channel (one scale per
  output channel of a convolution; the model's opset is raised to 13 for it).
- On an x86 CPU without VNNI (AVX2 or AVX-512 alone), ONNX Runtime's U8S8 kernels multiply
  with ``VPMADDUBSW``, whose 16-bit sums saturate; there the weights are kept to 7 bits
  (``reduce_range``, as ONNX Runtime's quantization guide advises), which cannot saturate. On
  CenterFace, on a Zen 1 machine, 8-bit weights lost 1 face in 5 and 7-bit weights none.
- MinMax calibration by default (the observed range of every activation); ``entropy`` and
  ``percentile`` clip outliers instead, which can help a model with rare large activations.
- Nothing is excluded by default: on CenterFace keeping its four output heads in FP32 made
  no measurable difference (the same faces agreed, the same error), and cost size.
  ``exclude`` names nodes or operator types to keep in FP32.

The INT8 file is written beside its destination and renamed over it when complete
(:func:`edgepipe.deploy.files.replacing`): whole or not at all, over a regular file only. It
carries its source's adapter and labels in its metadata (:func:`keep_outputs_info`), so that
detections of the INT8 CenterFace given by path still say "face".
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edgepipe.deploy.files import replacing
from edgepipe.deploy.quantize.calib import read_frames
from edgepipe.deploy.quantize.check import Check, check
from edgepipe.deploy.quantize.model import SourceModel, excluded_nodes, prepare
from edgepipe.infer import SessionConfig
from edgepipe.infer.footprint import read_metadata
from edgepipe.infer.metadata import metadata_props
from edgepipe.vision.model import load_model
from edgepipe.vision.preprocess import TensorCache

log = logging.getLogger(__name__)

METHODS = ("minmax", "entropy", "percentile")


@dataclass(frozen=True, slots=True)
class QuantizeOptions:
    """How to quantize and check."""

    calibration_frames: int = 16
    """Frames the activation ranges are measured on."""
    held_out_frames: int = 8
    """Other frames of the same input, for the FP32/INT8 check."""
    exclude: tuple[str, ...] = ()
    """Nodes (by name) or operator types kept in FP32."""
    per_channel: bool = True
    reduce_range: bool | None = None
    """7-bit weights; None: where the CPU's int8 products saturate (:func:`int8_saturates`)."""
    method: str = "minmax"
    input_size: int = 640
    """Longest input side for a model that takes any size (as the Detector's ``input_size``)."""
    adapter: str = "auto"
    """The output decoder (as the Detector's): ``auto`` reads it from the registry or outputs."""
    iou: float = 0.5
    score_threshold: float | None = None
    """For the detection check; None: the adapter's default, as the Detector."""


@dataclass(slots=True)
class QuantizeReport:
    model: str
    output: Path
    calibration: str
    calibration_frames: int
    input_shape: tuple[int, ...]
    excluded: list[str]
    fp32_bytes: int
    int8_bytes: int
    seconds: float
    check: Check
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        c = self.check
        agreement = c.agreement
        return {
            "model": self.model,
            "output": str(self.output),
            "calibration": {"source": self.calibration, "frames": self.calibration_frames,
                            "input_shape": list(self.input_shape)},
            "settings": self.settings,
            "excluded_nodes": self.excluded,
            "size_bytes": {"fp32": self.fp32_bytes, "int8": self.int8_bytes},
            "latency_ms": {"fp32": round(c.fp32_ms, 3), "int8": round(c.int8_ms, 3),
                           "fp32_preprocessed": None if c.prepared_ms is None else round(c.prepared_ms, 3)},
            "held_out_frames": c.frames,
            "outputs": [{"name": o.name, "mean_abs_error": o.mean_abs, "max_abs_error": o.max_abs,
                         "fp32_mean_abs": o.fp32_mean_abs} for o in c.outputs],
            "detections": None if agreement is None else {
                "fp32": agreement.fp32_detections, "int8": agreement.int8_detections,
                "matched": agreement.matched, "iou": agreement.iou, "agreement": agreement.share,
            },
            "seconds": round(self.seconds, 2),
        }  # fmt: skip


class _Reader:
    """``onnxruntime.quantization``'s calibration data reader over prepared tensors: one feed
    per frame, ``advance`` called as each is taken (the progress bar)."""

    def __init__(self, name: str, tensors: Sequence[Any], advance: Callable[[], None] | None) -> None:
        self._name = name
        self._tensors = list(tensors)
        self._next = 0
        self._advance = advance

    def get_next(self) -> dict[str, Any] | None:
        if self._next >= len(self._tensors):
            return None
        tensor = self._tensors[self._next]
        self._next += 1
        if self._advance is not None:
            self._advance()
        return {self._name: tensor}

    def rewind(self) -> None:
        self._next = 0

    def __len__(self) -> int:
        return len(self._tensors)


def quantize(
    source: SourceModel,
    output: Path,
    calib: Path,
    options: QuantizeOptions,
    *,
    calibrating: Callable[[], None] | None = None,
    checking: Callable[[], None] | None = None,
) -> QuantizeReport:
    """Quantize ``source`` into ``output`` (replaced if there) and check it. Blocking.

    ``calibrating`` is called per calibration frame, ``checking`` per held-out frame. Raises
    :class:`~edgepipe.deploy.quantize.calib.CalibError`,
    :class:`~edgepipe.deploy.quantize.model.ModelChoiceError` and what loading and running the models raise.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    t_start = time.perf_counter()
    sets = read_frames(calib, options.calibration_frames, options.held_out_frames)
    config = SessionConfig(cache_optimized=False, timeout_s=None)
    reduce_range = int8_saturates() if options.reduce_range is None else options.reduce_range
    with tempfile.TemporaryDirectory(prefix="edgepipe-quantize-") as work:
        prepared = Path(work) / "fp32.onnx"
        model_proto = prepare(source, prepared, per_channel=options.per_channel)
        excluded = excluded_nodes(model_proto, options.exclude)
        del model_proto
        fp32 = load_model(str(source.path), replace(config, free_image_dims=source.free_image_dims),
                          adapter=options.adapter, input_size=options.input_size)  # fmt: skip
        tensors = TensorCache(fp32, input_size=options.input_size, owner="quantize")
        feeds = [tensors(frame)[0].copy() for frame in sets.calibration]
        reader = _Reader(fp32.session.input(0).name, feeds, calibrating)
        with replacing(output) as part:
            quantize_static(
                str(prepared), str(part), reader, quant_format=QuantFormat.QDQ,
                per_channel=options.per_channel, activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8, nodes_to_exclude=excluded, reduce_range=reduce_range,
                calibrate_method={"minmax": CalibrationMethod.MinMax,
                                  "entropy": CalibrationMethod.Entropy,
                                  "percentile": CalibrationMethod.Percentile}[options.method],
            )  # fmt: skip
            keep_outputs_info(part, source, fp32.adapter, fp32.labels)
        int8 = load_model(str(output), config, adapter=fp32.adapter, input_size=options.input_size)
        optimized = load_model(str(prepared), config, adapter=fp32.adapter, input_size=options.input_size)
        try:
            result = check(fp32, int8, sets.held_out, tensors, iou=options.iou, prepared=optimized,
                           score_threshold=options.score_threshold, advance=checking)  # fmt: skip
        finally:
            for model in (fp32, int8, optimized):
                model.session.close()
    return QuantizeReport(
        model=source.name, output=output, calibration=sets.source,
        calibration_frames=len(feeds), input_shape=tuple(feeds[0].shape), excluded=excluded,
        fp32_bytes=source.path.stat().st_size, int8_bytes=output.stat().st_size,
        seconds=time.perf_counter() - t_start, check=result,
        settings={"format": "QDQ", "activations": "uint8", "weights": "int8",
                  "per_channel": options.per_channel, "weight_bits": 7 if reduce_range else 8,
                  "calibration_method": options.method,
                  "adapter": fp32.adapter, "labels": list(fp32.labels)},
    )  # fmt: skip


def keep_outputs_info(int8: Path, source: SourceModel, adapter: str, labels: Sequence[str]) -> None:
    """Write into the INT8 model at ``int8`` the adapter and labels its source was read with
    (:mod:`edgepipe.infer.metadata`), over the source's own metadata: given by path, it decodes
    and names its detections as its source does (a registry model's file carries neither; its
    entry does)."""
    import onnx

    model = onnx.load(str(int8))
    props = {**read_metadata(source.path), **{p.key: p.value for p in model.metadata_props}}
    props.update(metadata_props(adapter, labels, source.entry.name if source.entry else source.name))
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(int8))


VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def int8_saturates(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether ONNX Runtime's U8S8 products can saturate here: an x86 CPU without VNNI.

    False where that cannot be read (not Linux) or the CPU is not x86 (ARM's dot products
    do not saturate).
    """
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return "avx2" in flags and not flags & VNNI_FLAGS
    return False
