"""The ``Detector`` node: frames in, :class:`Detections` out.

::

    p.stage("faces", Detector("centerface"), inputs=camera)  # a live camera: a latest lane of one

On ``start()`` it resolves the model (a registry name is fetched once if missing; a path is
used as is), loads it (:class:`~edgepipe.infer.Session`: providers, threads, deadline), runs it
once on a blank picture to pick the output adapter and to time the first result. Per frame, on
a worker thread: NV12/I420 -> reused input tensor (:mod:`edgepipe.media.tensor`) -> one
deadline-bounded run -> adapter -> NMS -> boxes in source pixels.

Its steps are the runtime's calls in flight (:mod:`edgepipe.runtime.inflight.steps`): ``prepare()``
picks the frames the model sees (:mod:`~edgepipe.vision.selection`) and fills their tensors, in
order; ``process()`` runs the model on up to ``instances`` frames at once, one intra-op thread
each (on 2 cores at 70%, a second call in the spare unit, paced by the governor); ``finish()``
tracks, in each camera's order. ``prefer="latency"`` runs one call at a time, as wide as the
budget allows: half the wait for a result, fewer frames for the CPU.

With ``every=N`` the model sees one frame in N per source and an IoU tracker carries the boxes
(and track ids) over the others; streams are given different phases across every detector of
the process (:mod:`edgepipe.sched.stagger`), so that four cameras with ``every=4`` take turns
instead of all hitting the model on the same frame. Under CPU pressure the governor sheds the
second call first (:class:`~edgepipe.sched.knobs.InstancesKnob`), then raises the interval
above ``every`` (:class:`~edgepipe.sched.knobs.EveryKnob`) unless ``pin_every`` says the model
must see every frame it is given (a privacy filter: the governor then paces it and thins the
frames before the detector instead).

The steps live apart: loading and warm-up in :mod:`~edgepipe.vision.model`, input tensors in
:mod:`~edgepipe.vision.preprocess`, model runs (and batches) in :mod:`~edgepipe.vision.batching`,
outputs to boxes in :mod:`~edgepipe.vision.decoding`, tracks in :mod:`~edgepipe.vision.tracker`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from edgepipe.core.checks import Range
from edgepipe.core.context import CallLimit, current_node
from edgepipe.infer import Session, SessionConfig
from edgepipe.media.frame import Frame
from edgepipe.media.tensor import Method, TensorFormat
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.plan import PlanNode
from edgepipe.sched.budget import cpu_budget
from edgepipe.sched.governor import Knob
from edgepipe.sched.knobs import PINNED_DUTIES, EveryKnob, InstancesKnob, PaceKnob
from edgepipe.vision import adapters
from edgepipe.vision.batching import BatchRunner
from edgepipe.vision.decoding import DetectionDecoder
from edgepipe.vision.detection import Detections
from edgepipe.vision.model import LoadedModel, load_model
from edgepipe.vision.preprocess import Normalize, Prepared, TensorCache
from edgepipe.vision.reservations import plan_detector
from edgepipe.vision.selection import ModelFrames
from edgepipe.vision.tracker import SourceTrackers

__all__ = ["Detector", "Normalize", "Prepared"]


@dataclass(frozen=True, slots=True)
class _Steps:
    """What an open detector runs each frame through, made together once the model is loaded."""

    model: LoadedModel
    tensors: TensorCache
    runner: BatchRunner
    decoder: DetectionDecoder


class Detector:
    """An object detector as a pipeline stage. See the module docstring."""

    loads_model = True
    """The scheduler counts the run's models (:attr:`~edgepipe.sched.budget.CpuBudget.model_nodes`)."""

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
        pin_every: bool = False,
        keep_up: bool | None = None,
        instances: int | Literal["auto"] = "auto",
        prefer: Literal["throughput", "latency"] = "throughput",
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
        pin_every: the governor never raises the interval above ``every`` (it thins the
            frames before this node instead).
        keep_up: on live input (``latest`` lanes), raise the interval so that every frame
            gets boxes (the tracker's between model runs) when the model cannot run on each
            (:mod:`edgepipe.vision.keepup`), each camera's at its rhythm (:attr:`steady`). None:
            with two live streams or more; one stream keeps the model on the newest frame.
        instances: model runs in flight at once, one intra-op thread each (``"auto"``: the CPU
            budget's units, 2 on 2 cores; 1 ungoverned).
        prefer: ``"throughput"`` or ``"latency"`` (one run at a time on every thread the budget
            allows: about half the wait for a result, 15-20% more CPU a run beside other work).
        """
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        for name, value, allowed in (("input_size", input_size, Range(32, 4096)),
                                     ("score_threshold", score_threshold, Range(0, 1)),
                                     ("iou_threshold", iou_threshold, Range(0, 1)),
                                     ("max_detections", max_detections, Range(1))):  # fmt: skip
            try:
                allowed.check(value)
            except ValueError as exc:
                raise ValueError(f"{name} must be {exc}, got {value!r}") from None
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if instances != "auto" and (
            isinstance(instances, bool) or not isinstance(instances, int) or instances < 1
        ):
            raise ValueError(f"instances must be a count of at least 1 or 'auto', got {instances!r}")
        if prefer not in ("throughput", "latency"):
            raise ValueError(f"prefer must be 'throughput' or 'latency', got {prefer!r}")
        if prefer == "latency" and instances not in ("auto", 1):
            raise ValueError(f"prefer='latency' runs one call at a time; instances={instances} asks for "
                             "several: drop one of them")  # fmt: skip
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
        self.pin_every = pin_every
        self.keep_up = keep_up
        self.track = every > 1 if track is None else track
        self._may_track = track is not False
        """The governor may raise the interval: boxes are then carried by the tracker."""
        self.normalize = normalize
        self.box_format = box_format
        self.session_config = session or SessionConfig(timeout_s=2.0)
        self.preprocess_method = preprocess
        self.keep_frame = keep_frame
        self.batch_size = batch_size
        self.prefer = prefer
        self.instances: int | str = 1 if prefer == "latency" else instances
        """The calls in flight it asks the runtime for (what the run gives it: :attr:`calls`)."""
        self.calls = 1
        """Its calls in flight in the run (``instances`` resolved by the CPU budget)."""
        self._limit = CallLimit()  # and how many the governor allows now (its node's)
        self.session: Session | None = None
        self.model_name = self.model
        self.frames = 0
        self.inferred = 0
        self._steps: _Steps | None = None
        self._last_format: TensorFormat | None = None
        self._tracks = SourceTrackers()
        self._gauges: dict[str, Any] = {}
        self._owner = "detector"
        self._priority = 1
        self.frame_choice = ModelFrames(every, keep_up)
        """Which frames the model sees (the governor's interval is its ``every_now``)."""

    def __repr__(self) -> str:
        return f"Detector({self.model!r})"

    @property
    def defers_calls(self) -> bool:  # keeping up, a frame with no call free is carried
        return self.frame_choice.keeping_up

    @property
    def steady(self) -> bool:
        """Keeping up with live cameras, results leave at their rhythm (runtime.inflight.present)."""
        return self.frame_choice.keeping_up

    @property
    def prefers_latency(self) -> bool:  # one call at a time, as wide as the budget allows
        return self.prefer == "latency"

    @property
    def input_format(self) -> TensorFormat | None:
        """The model's input for the newest frame size seen (None before the first frame the
        model sees; after :meth:`stop`, the last one)."""
        return self._steps.tensors.input_format if self._steps is not None else self._last_format

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
        self._priority = ctx.priority
        self._gauges = self.frame_choice.gauges = ctx.gauges
        self.calls = ctx.calls.instances
        self._limit = ctx.calls
        self.frame_choice.keeps_up = (
            ctx.live_input and self._may_track and not self.pin_every and self.keep_up is not False
        )
        await ctx.run_blocking(self.open)

    def open(self) -> None:
        """Resolve, load and warm up the model (:func:`~edgepipe.vision.model.load_model`).
        Blocking (a registry model may be fetched)."""
        if self.session is not None and not self.session.closed:
            return
        config = self.session_config
        if config.threads is None:
            config = replace(
                config, threads=cpu_budget().call_threads(self.calls, latency=self.prefers_latency)
            )
        model = load_model(self.model, config, adapter=self.adapter, labels=self.labels,
                           input_size=self.input_size, owner=self._owner)  # fmt: skip
        self.model_name = model.name
        self.adapter = model.adapter
        self.labels = model.labels
        tensors = TensorCache(
            model, input_size=self.input_size, normalize=self.normalize, method=self.preprocess_method,
            batch_size=self.batch_size, instances=self.calls, owner=self._owner, gauges=self._gauges,
        )  # fmt: skip
        decoder = DetectionDecoder(
            model, score_threshold=self.score_threshold, iou_threshold=self.iou_threshold,
            classes=self.classes, max_detections=self.max_detections, box_format=self.box_format,
        )  # fmt: skip
        runner = BatchRunner(model, batch_size=self.batch_size, gauges=self._gauges)
        self._steps = _Steps(model, tensors, runner, decoder)
        session = self.session = model.session
        session.ticket.set_owner(self._owner, "detect", self._priority)
        self.frame_choice.opened(self._limit, session.ticket, session.stats.last_run_ms / 1000)
        self._gauges.update({
            "model": self.model_name, "provider": session.providers[0].removesuffix("ExecutionProvider"),
            "adapter": self.adapter,
        })  # fmt: skip

    def stop(self) -> None:
        """Forget the streams and let the model and its tensors go (out of the memory plan;
        ``session.stats`` stay readable); :meth:`start` loads it again (a restart)."""
        self._tracks.clear()
        self.frame_choice.forget()
        if self._steps is not None:
            self._last_format = self._steps.tensors.input_format
        self._steps = None
        if self.session is not None:
            self.session.close()

    def governor_knobs(self, node_id: str, priority: int) -> list[Knob]:
        """For the governor: its calls beyond the main units (shed first), and the interval
        (pinned when ``pin_every``, or without a tracker to carry the boxes between runs).
        Pinned, its runs are paced in fine steps (:data:`PINNED_DUTIES`) before its frames are
        thinned: it settles near the target, not a whole "1 frame in 2" under it."""
        knob = EveryKnob(node_id, priority, self.frame_choice, self.every)
        knob.pinned = self.pin_every or not self._may_track
        tickets = [self.session.ticket] if self.session is not None else []
        knobs: list[Knob] = [knob]
        if self.calls > 1 and tickets:
            knobs.append(InstancesKnob(node_id, priority, tickets, self._limit))
        if knob.pinned and tickets:
            knobs.append(PaceKnob(node_id, priority, tickets, PINNED_DUTIES))
        return knobs

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> None:
        """What :meth:`open` and the first frames would reserve (:mod:`edgepipe.vision.reservations`)."""
        plan_detector(plan, node, model=self.model, session=self.session_config, input_size=self.input_size,
                      batch_size=self.batch_size, instances=node.instances)  # fmt: skip

    # -- per frame ----------------------------------------------------------------------------

    def prepare(self, frame: Frame) -> Prepared:
        """Step one (a worker thread, CPU): decide whether the model sees this frame, and if so
        fill an input tensor from it. The runtime overlaps it with the previous frame's
        :meth:`process` where that keeps the output the same (see :mod:`edgepipe.runtime.inflight.steps`)."""
        if self._steps is None:
            self.open()
        assert self._steps is not None
        if not self.frame_choice.wants(frame):
            return Prepared(frame, None, None)
        tensor, box = self._steps.tensors(frame)
        return Prepared(frame, tensor, box)

    def process(self, item: Frame | Prepared) -> Any:
        """Step two (a worker thread; up to ``instances`` at once): the model's run on a prepared
        frame and its outputs decoded into boxes in source pixels, kept on the prepared frame for
        :meth:`finish`, which it returns. Blocks for the run. Given a frame (not prepared), all
        three steps at once: its :class:`Detections`."""
        if not isinstance(item, Prepared):
            prepared = self.prepare(item)
            try:
                return self.finish(self.process(prepared))
            finally:
                prepared.release()
        if item.tensor is not None:
            t0 = time.perf_counter()
            steps = self._steps
            assert steps is not None
            self._infer(item, steps.runner.run(item.tensor))
            item.took_s = time.perf_counter() - t0
        return item

    def process_batch(self, items: list[Frame | Prepared]) -> list[Any]:
        """Step two for several frames (those already waiting in the inbox, when ``batch_size``
        > 1: see :mod:`edgepipe.runtime.batched`), with one model run per input size when the
        model takes a batch, one run per frame otherwise: the prepared frames, for
        :meth:`finish`. Given frames (not prepared), their :class:`Detections`."""
        prepared = [item if isinstance(item, Prepared) else self.prepare(item) for item in items]
        try:
            steps = self._steps
            assert steps is not None
            ready = [p for p in prepared if p.tensor is not None]
            t0 = time.perf_counter()
            outputs = steps.runner.run_batch([p.tensor for p in ready])  # type: ignore[misc]
            took_s = time.perf_counter() - t0
            for p, out in zip(ready, outputs, strict=True):
                self._infer(p, out)
                p.took_s = took_s / len(ready)
            if all(isinstance(item, Prepared) for item in items):
                return list(prepared)
            return [self.finish(p) for p in prepared]
        finally:
            for item, ready_item in zip(items, prepared, strict=True):
                if ready_item is not item:
                    ready_item.release()

    def _infer(self, prepared: Prepared, outputs: list[np.ndarray]) -> None:
        """The model's outputs for ``prepared`` decoded into its boxes (any thread)."""
        steps = self._steps
        assert steps is not None
        assert prepared.tensor is not None
        assert prepared.letterbox is not None
        prepared.found = steps.decoder.decode(outputs, prepared.tensor.shape, prepared.letterbox)
        prepared.infer_ms = steps.model.session.thread_run_ms

    def finish(self, prepared: Prepared) -> Detections:
        """Step three (in each camera's order, one at a time; the event loop under the runtime):
        the model's boxes tracked, or the tracker's carried over a frame the model skipped, as
        :class:`Detections`. Quick: bookkeeping only."""
        frame = prepared.frame
        self.frames += 1
        found = prepared.found
        run_model = prepared.tensor is not None
        if found is not None:
            self.inferred += 1
            if prepared.infer_ms is not None:
                self._gauges["infer_ms"] = round(prepared.infer_ms, 1)
            if self.session is not None:
                self._gauges["timeouts"] = self.session.stats.timeouts
            if self.frame_choice.keeps_up:
                self.frame_choice.keep.took(prepared.took_s, (prepared.infer_ms or 0.0) / 1000)
        items = found if not self._may_track else self._tracks.follow(
            frame.source_id, found, frame.seq, ids=self.track or self.frame_choice.every_used > 1
        )  # fmt: skip
        assert items is not None, "a frame the model skipped has the tracker's boxes"
        latency_ms = (time.monotonic_ns() - frame.t_decoded_ns) / 1e6
        result = Detections(
            frame.source_id, frame.seq, frame.pts, frame.time_s, frame.width, frame.height, self.model_name,
            items, inferred=run_model, latency_ms=latency_ms, infer_ms=prepared.infer_ms,
            t_decoded_ns=frame.t_decoded_ns,
        )  # fmt: skip
        if self.keep_frame:
            frame.retain()  # released with the detections (Detections._free)
            result.frame = frame
        return result
