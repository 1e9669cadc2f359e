"""The ``Detector`` node: frames in, :class:`Detections` out.

::

    p.stage("faces", Detector("centerface"), inputs=camera, policy="latest", queue_size=1)

On ``start()`` it resolves the model (a registry name is fetched once if missing; a path is
used as is), loads it (:class:`~edgepipe.infer.Session`: providers, threads, deadline), runs it
once on a blank picture to pick the output adapter and to time the first result. Per frame, on
a worker thread: NV12/I420 -> reused input tensor (:mod:`edgepipe.media.tensor`) -> one
deadline-bounded run -> adapter -> NMS -> boxes in source pixels.

With ``every=N`` the model sees one frame in N per source and an IoU tracker carries the boxes
(and track ids) over the others; sources are given different phases, so that four cameras with
``every=4`` take turns instead of all hitting the model on the same frame.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edgepipe.core.context import current_node
from edgepipe.core.lease import Leased
from edgepipe.infer import Session, SessionConfig
from edgepipe.infer.registry import resolve
from edgepipe.media.frame import Frame
from edgepipe.media.tensor import Letterbox, Method, Preprocessor, TensorFormat
from edgepipe.vision import adapters
from edgepipe.vision.detection import Detection, Detections
from edgepipe.vision.labels import COCO80, label_for
from edgepipe.vision.nms import nms
from edgepipe.vision.tracker import IouTracker

log = logging.getLogger(__name__)

_DEFAULT_SCORE = {"centerface": 0.4, "yolov5": 0.25, "yolov8": 0.25, "yolo-nms": 0.25, "ssd": 0.4}
_STRIDE = 32


@dataclass(frozen=True, slots=True)
class Normalize:
    """Pixel (0..255) -> model value: ``(pixel * scale - mean) / std`` per channel."""

    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    channels: str = "rgb"


_DEFAULT_NORMALIZE = {"centerface": Normalize(scale=1.0)}


class Detector:
    """An object detector as a pipeline stage. See the module docstring."""

    def __init__(
        self,
        model: str = "centerface",
        *,
        adapter: str = "auto",
        labels: Sequence[str] | None = None,
        classes: Sequence[str] | None = None,
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        max_detections: int = 100,
        input_size: int = 640,
        every: int = 1,
        track: bool | None = None,
        normalize: Normalize | None = None,
        box_format: adapters.BoxFormat = "yxyx_norm",
        session: SessionConfig | None = None,
        preprocess: Method = "auto",
        keep_frame: bool = False,
        batch_size: int = 1,
    ) -> None:
        """
        model: registry name (``edgepipe models list``) or path to an ``.onnx`` file.
        adapter: output decoder (``centerface``, ``yolov5``, ``yolov8``, ``yolo-nms``, ``ssd``)
            or ``auto`` (chosen from the outputs of a first run).
        labels: class names by index (default: the registry's, COCO's for 80-class YOLO).
        classes: keep only these labels.
        input_size: longest side of the input for models that take any size (fixed-size models
            use their own), rounded up to a multiple of 32; smaller frames keep their size.
        every: run the model on one frame in ``every`` per source; the tracker fills the rest.
        track: assign track ids (default: on when ``every`` > 1).
        session: providers, threads, run deadline (``timeout_s``), optimization.
        keep_frame: the results carry the frame (and its lease) for overlays downstream.
        batch_size: run up to this many waiting frames (several cameras into one inbox) through
            the model at once, for models whose batch dimension is free; 1 runs them one by one.
        """
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if every > 1 and track is False:
            raise ValueError(
                "every > 1 needs the tracker (track=True): it carries the boxes between model runs"
            )
        if adapter != "auto" and adapter not in adapters.ADAPTERS:
            raise ValueError(
                f"unknown adapter {adapter!r}; use auto or one of {', '.join(adapters.ADAPTERS)}"
            )
        self.model = str(model)
        self.adapter = adapter
        self.labels = tuple(labels) if labels is not None else None
        self.classes = frozenset(classes) if classes else None
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self.max_detections = max_detections
        self.input_size = input_size
        self.every = every
        self.track = every > 1 if track is None else track
        self.normalize = normalize
        self.box_format = box_format
        self.session_config = session or SessionConfig(timeout_s=2.0)
        self.preprocess_method = preprocess
        self.keep_frame = keep_frame
        self.batch_size = batch_size
        self._batchable = False
        self._batch_buffers: dict[tuple[int, ...], np.ndarray] = {}
        self.session: Session | None = None
        self.model_name = self.model
        self._fixed_hw: tuple[int, int] | None = None
        self._layout = "nchw"
        self._dtype: Any = np.float32
        self._preprocessors: dict[tuple[int, int], Preprocessor] = {}
        self._trackers: dict[str, IouTracker] = {}
        self._track_lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._gauges: dict[str, Any] = {}
        self.frames = 0
        self.inferred = 0
        self._owner = "detector"

    def __repr__(self) -> str:
        return f"Detector({self.model!r})"

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            ctx = current_node()
        except RuntimeError:
            ctx = None
        if ctx is None or ctx.run_blocking is None:
            self.open()
            return
        self._owner = ctx.node_id
        self._gauges = ctx.gauges
        await ctx.run_blocking(self.open)

    def open(self) -> None:
        """Resolve, load and warm up the model. Blocking (a registry model may be fetched)."""
        if self.session is not None:
            return
        resolved = resolve(self.model)
        entry = resolved.entry
        self.model_name = resolved.name
        config = self.session_config
        if entry is not None and entry.free_image_dims and not config.free_image_dims:
            config = replace(config, free_image_dims=True)
        session = Session(resolved.path, config, name=resolved.name)
        spec = session.input(0)
        self._layout, fixed = _layout(spec.shape)
        self._fixed_hw = fixed
        self._dtype = spec.dtype or np.float32
        self._batchable = not isinstance(spec.shape[0], int)  # a free batch dimension
        if self.adapter == "auto" and entry is not None:
            self.adapter = entry.adapter
        if self.labels is None and entry is not None and entry.labels:
            self.labels = entry.labels
        height, width = fixed or (_round_up(self.input_size * 3 // 4), _round_up(self.input_size))
        blank = np.zeros(_tensor_shape(self._layout, height, width), self._dtype)
        outputs = session.run({spec.name: blank}, timeout_s=max(30.0, config.timeout_s or 0))
        if self.adapter == "auto":
            self.adapter = adapters.guess(session.output_names, [o.shape for o in outputs])
            log.info("model %s: outputs read as %s", self.model_name, self.adapter)
        if self.labels is None:
            self.labels = COCO80 if _class_count(self.adapter, outputs) == 80 else ()
        self.session = session
        self._gauges.update({
            "model": self.model_name, "provider": session.providers[0].removesuffix("ExecutionProvider"),
            "adapter": self.adapter,
        })  # fmt: skip

    def stop(self) -> None:
        self._trackers.clear()

    # -- per frame ----------------------------------------------------------------------------

    def prepare(self, frame: Frame) -> Prepared:
        """Step one (a worker thread, CPU): decide whether the model sees this frame, and if so
        fill an input tensor from it. The runtime overlaps it with the previous frame's
        :meth:`process` where that keeps the output the same (see :mod:`edgepipe.core.prepared`)."""
        if self.session is None:
            self.open()
        source = frame.source_id
        # Counted per source over the frames this node receives (not by frame number: a
        # ``latest`` inbox drops frames, and counting seq would then always land on the same
        # phase), offset per source so that streams take turns.
        # A new source's first frame always goes to the model: its tracker has nothing to carry
        # yet (and an overlay such as a face blur must not start with an empty frame).
        count = self._counts.get(source)
        first = count is None
        if count is None:
            count = len(self._counts) % self.every
        self._counts[source] = count + 1
        run_model = first or count % self.every == 0
        if not run_model:
            return Prepared(frame, None, None)
        tensor, box = self._preprocessor(frame.width, frame.height)(frame)
        return Prepared(frame, tensor, box)

    def process(self, item: Frame | Prepared) -> Detections:
        """Detections for a frame (prepared by :meth:`prepare`, or not yet). Runs on a worker
        thread; blocks for the model run."""
        if isinstance(item, Prepared):
            return self._detect(item)
        prepared = self.prepare(item)
        try:
            return self._detect(prepared)
        finally:
            prepared.release()

    def process_batch(self, items: list[Frame | Prepared]) -> list[Detections]:
        """Detections for several frames (those already waiting in the inbox, when
        ``batch_size`` > 1: see :mod:`edgepipe.core.batched`), with one model run per input
        size when the model takes a batch, one run per frame otherwise."""
        prepared = [item if isinstance(item, Prepared) else self.prepare(item) for item in items]
        try:
            outputs = self._run_batch([p for p in prepared if p.tensor is not None])
            return [self._detect(p, outputs.get(id(p))) for p in prepared]
        finally:
            for item, ready in zip(items, prepared, strict=True):
                if ready is not item:
                    ready.release()

    def _run_batch(self, ready: list[Prepared]) -> dict[int, list[np.ndarray]]:
        session = self.session
        assert session is not None
        out: dict[int, list[np.ndarray]] = {}
        groups: dict[tuple[int, ...], list[Prepared]] = {}
        for p in ready:
            assert p.tensor is not None
            groups.setdefault(p.tensor.shape, []).append(p)
        for shape, group in groups.items():
            if len(group) == 1 or not self._batchable:
                for p in group:
                    out[id(p)] = self._run(p)
                continue
            buffer = self._batch_buffers.get(shape)
            if buffer is None or len(buffer) < len(group):
                buffer = self._batch_buffers[shape] = np.empty((max(self.batch_size, len(group)), *shape[1:]),
                                                               self._dtype)  # fmt: skip
            for i, p in enumerate(group):
                np.copyto(buffer[i], p.tensor[0])  # type: ignore[index]
            outputs = session.run({session.inputs[0].name: buffer[: len(group)]})
            self._gauges["batch"] = len(group)
            for i, p in enumerate(group):
                out[id(p)] = self._one_of(outputs, i)
        return out

    def _one_of(self, outputs: list[np.ndarray], i: int) -> list[np.ndarray]:
        """Image ``i``'s share of a batch's outputs, shaped as a batch of one."""
        mine = []
        for output in outputs:
            if self.adapter == "yolo-nms" and output.ndim == 2:  # [N, 7] rows tagged by image
                rows = output[output[:, 0] == i].copy()
                rows[:, 0] = 0
                mine.append(rows)
            else:
                mine.append(output[i : i + 1])
        return mine

    def _run(self, prepared: Prepared) -> list[np.ndarray]:
        session = self.session
        assert session is not None
        assert prepared.tensor is not None
        outputs: list[np.ndarray] = session.run({session.inputs[0].name: prepared.tensor})
        return outputs

    def _detect(self, prepared: Prepared, outputs: list[np.ndarray] | None = None) -> Detections:
        frame = prepared.frame
        self.frames += 1
        if prepared.tensor is not None:
            items = self._decode(prepared, outputs if outputs is not None else self._run(prepared))
            self.inferred += 1
        with self._track_lock:  # a call abandoned at its deadline may finish during the next one
            tracker = self._trackers.setdefault(frame.source_id, IouTracker()) if self.track else None
            if prepared.tensor is not None:
                if tracker is not None:
                    items = tracker.update(items, frame.seq)
            else:
                assert tracker is not None
                items = tracker.predict(frame.seq)
        run_model = prepared.tensor is not None
        latency_ms = (time.monotonic_ns() - frame.t_capture_ns) / 1e6
        result = Detections(
            frame.source_id, frame.seq, frame.pts, frame.time_s, frame.width, frame.height, self.model_name,
            items, inferred=run_model, latency_ms=latency_ms,
            t_capture_ns=frame.t_capture_ns,
        )  # fmt: skip
        if self.keep_frame:
            frame.retain()  # released with the detections (Detections._free)
            result.frame = frame
        return result

    def _decode(self, prepared: Prepared, outputs: list[np.ndarray]) -> list[Detection]:
        session = self.session
        assert session is not None
        tensor, box = prepared.tensor, prepared.letterbox
        assert tensor is not None
        assert box is not None
        height, width = tensor.shape[2:4] if self._layout == "nchw" else tensor.shape[1:3]
        found = adapters.decode(
            self.adapter, outputs, session.output_names, self._score_threshold(), width, height,
            self.box_format,
        )  # fmt: skip
        if self.classes is not None and len(found.class_ids):
            wanted = [i for i, c in enumerate(found.class_ids) if self._label(int(c)) in self.classes]
            found = found.take(np.asarray(wanted, np.intp))
        if not found.suppressed and len(found.scores):
            iou = self.iou_threshold if self.iou_threshold is not None else adapters.DEFAULT_IOU[self.adapter]
            found = found.take(nms(found.boxes, found.scores, iou, found.class_ids, self.max_detections))
        elif len(found.scores) > self.max_detections:
            found = found.take(np.argsort(-found.scores)[: self.max_detections])
        box.to_source(found.boxes)
        if found.landmarks is not None:
            box.to_source(found.landmarks.reshape(len(found.landmarks), -1))
        self._gauges["infer_ms"] = round(session.stats.last_run_ms, 1)
        self._gauges["timeouts"] = session.stats.timeouts
        return [self._detection(found, i) for i in range(len(found.scores))]

    def _detection(self, found: adapters.Candidates, i: int) -> Detection:
        b = found.boxes[i]
        class_id = int(found.class_ids[i])
        marks = None
        if found.landmarks is not None:
            marks = tuple((float(x), float(y)) for x, y in found.landmarks[i])
        box = (float(b[0]), float(b[1]), float(b[2]), float(b[3]))
        return Detection(box, float(found.scores[i]), class_id, self._label(class_id), marks)

    def _label(self, class_id: int) -> str:
        return label_for(class_id, self.labels or ())

    def _score_threshold(self) -> float:
        return self.score_threshold if self.score_threshold is not None else _DEFAULT_SCORE[self.adapter]

    def _preprocessor(self, width: int, height: int) -> Preprocessor:
        pre = self._preprocessors.get((width, height))
        if pre is not None:
            return pre
        if self._fixed_hw is not None:
            in_h, in_w = self._fixed_hw
            center = True
        else:
            # Any size works: the frame's own shape at input_size (never enlarged: upscaling
            # adds work, not detail), padded to the stride only.
            scale = min(1.0, self.input_size / max(width, height))
            in_w, in_h = _round_up(width * scale), _round_up(height * scale)
            center = False
        norm = self.normalize or _DEFAULT_NORMALIZE.get(self.adapter, Normalize())
        if np.dtype(self._dtype) == np.uint8:
            norm = Normalize(scale=1.0, channels=norm.channels)
        fmt = TensorFormat(
            in_w, in_h, layout=self._layout, channels=norm.channels,  # type: ignore[arg-type]
            scale=norm.scale, mean=norm.mean, std=norm.std, dtype=self._dtype,
            pad_pixel=114.0 if center else 0.0, center=center,
        )  # fmt: skip
        # Tensors in turn: one being filled while the model reads another (prepare and process
        # overlap) or a batch of them, and one for a run abandoned at its deadline.
        buffers = max(3, self.batch_size + 1)
        pre = Preprocessor(fmt, self.preprocess_method, buffers=buffers, owner=self._owner)
        if len(self._preprocessors) > 8:  # a source that keeps changing size must not grow memory
            self._preprocessors.clear()
        self._preprocessors[(width, height)] = pre
        self._gauges["input"] = f"{in_w}x{in_h}"
        return pre


class Prepared(Leased):
    """A frame made ready for the model: its input tensor and letterbox (None on frames the
    tracker fills in). Holds a lease on the frame until it is released."""

    __slots__ = ("frame", "letterbox", "tensor")

    def __init__(self, frame: Frame, tensor: np.ndarray | None, letterbox: Letterbox | None) -> None:
        super().__init__()
        frame.retain()
        self.frame = frame
        self.tensor = tensor
        self.letterbox = letterbox

    def _free(self) -> None:
        self.frame.release()


def _round_up(value: float) -> int:
    return max(_STRIDE, math.ceil(value / _STRIDE) * _STRIDE)


def _layout(shape: tuple[int | str | None, ...]) -> tuple[str, tuple[int, int] | None]:
    """("nchw" | "nhwc", fixed (height, width) or None) from the image input's declared shape."""
    if len(shape) != 4:
        raise ValueError(
            f"the detector's first input must be an image [N, C, H, W] or [N, H, W, C], got {list(shape)}"
        )
    if shape[1] == 3:
        layout, hw = "nchw", (shape[2], shape[3])
    elif shape[3] == 3:
        layout, hw = "nhwc", (shape[1], shape[2])
    else:
        layout, hw = "nchw", (shape[2], shape[3])
    if isinstance(hw[0], int) and isinstance(hw[1], int) and hw[0] > 0 and hw[1] > 0:
        return layout, (hw[0], hw[1])
    return layout, None


def _tensor_shape(layout: str, height: int, width: int) -> tuple[int, int, int, int]:
    return (1, 3, height, width) if layout == "nchw" else (1, height, width, 3)


def _class_count(adapter: str, outputs: Sequence[np.ndarray]) -> int:
    shape = outputs[0].shape
    if adapter == "yolov8" and len(shape) == 3:
        return int(shape[1]) - 4
    if adapter == "yolov5" and len(shape) == 3:
        return int(shape[2]) - 5
    return 0
