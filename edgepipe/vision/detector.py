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
the run (:mod:`edgepipe.sched.stagger`), so that four cameras with ``every=4`` take turns
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
from dataclasses import dataclass, replace
from typing import Any, Self

import numpy as np

from edgepipe.core.configured import configured, keywords
from edgepipe.core.context import CallLimit, current_node
from edgepipe.infer import Session
from edgepipe.media.frame import Frame
from edgepipe.media.tensor import TensorFormat
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanNode
from edgepipe.sched.budget import cpu_budget
from edgepipe.sched.governor import Knob
from edgepipe.sched.knobs import PINNED_DUTIES, EveryKnob, InstancesKnob, PaceKnob
from edgepipe.vision.batching import BatchRunner
from edgepipe.vision.config import DetectorConfig
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

    @configured(DetectorConfig)
    def __init__(self, config: DetectorConfig) -> None:
        """The keywords of :class:`~edgepipe.vision.config.DetectorConfig` (each checked: a
        ``ValueError`` names the one that cannot work). :meth:`from_config` takes one built."""
        self.config = config
        self.adapter = config.adapter
        """The output decoder: the config's, then the one the model was loaded with (``auto`` chosen)."""
        self.labels = tuple(config.labels) if config.labels is not None else None
        """Class names by index: the config's, then the loaded model's."""
        self.instances: int | str = config.instances_asked
        """The calls in flight it asks the runtime for (what the run gives it: :attr:`calls`)."""
        self.calls = 1
        """Its calls in flight in the run (``instances`` resolved by the CPU budget)."""
        self._limit = CallLimit()  # and how many the governor allows now (its node's)
        self.session: Session | None = None
        self.model_name = config.model
        self.frames = 0
        self.inferred = 0
        self._steps: _Steps | None = None
        self._last_format: TensorFormat | None = None
        self._tracks = SourceTrackers()
        self._gauges: dict[str, Any] = {}
        self._owner = "detector"
        self._priority = 1
        self.frame_choice = ModelFrames(config.every, config.keep_up)
        """Which frames the model sees (the governor's interval is its ``every_now``)."""

    @classmethod
    def from_config(cls, config: DetectorConfig) -> Self:
        """A detector of ``config`` (its settings checked again: they pass)."""
        return cls(**keywords(config))

    def __repr__(self) -> str:
        return f"Detector({self.config.model!r})"

    @property
    def batch_size(self) -> int:
        """Frames per model run at most (the runtime hands it that many waiting ones)."""
        return self.config.batch_size

    @property
    def defers_calls(self) -> bool:  # keeping up, a frame with no call free is carried
        return self.frame_choice.keeping_up

    @property
    def steady(self) -> bool:
        """Keeping up with live cameras, results leave at their rhythm (runtime.inflight.present)."""
        return self.frame_choice.keeping_up

    @property
    def prefers_latency(self) -> bool:  # one call at a time, as wide as the budget allows
        return self.config.prefer == "latency"

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
        config = self.config
        self.frame_choice.keeps_up = (
            ctx.live_input and config.may_track and not config.pin_every and config.keep_up is not False
        )
        await ctx.run_blocking(self.open)

    def open(self) -> None:
        """Resolve, load and warm up the model (:func:`~edgepipe.vision.model.load_model`).
        Blocking (a registry model may be fetched)."""
        if self.session is not None and not self.session.closed:
            return
        wanted = self.config
        config = wanted.session_config
        if config.threads is None:
            config = replace(
                config, threads=cpu_budget().call_threads(self.calls, latency=self.prefers_latency)
            )
        model = load_model(wanted.model, config, adapter=self.adapter, labels=self.labels,
                           input_size=wanted.input_size, owner=self._owner)  # fmt: skip
        self.model_name = model.name
        self.adapter = model.adapter
        self.labels = model.labels
        tensors = TensorCache(
            model, input_size=wanted.input_size, normalize=wanted.normalize, method=wanted.preprocess,
            batch_size=wanted.batch_size, instances=self.calls, owner=self._owner, gauges=self._gauges,
        )  # fmt: skip
        decoder = DetectionDecoder(
            model, score_threshold=wanted.score_threshold, iou_threshold=wanted.iou_threshold,
            classes=frozenset(wanted.classes) if wanted.classes else None,
            max_detections=wanted.max_detections, box_format=wanted.box_format,
        )  # fmt: skip
        runner = BatchRunner(model, batch_size=wanted.batch_size, gauges=self._gauges)
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
        knob = EveryKnob(node_id, priority, self.frame_choice, self.config.every)
        knob.pinned = self.config.pin_every or not self.config.may_track
        tickets = [self.session.ticket] if self.session is not None else []
        knobs: list[Knob] = [knob]
        if self.calls > 1 and tickets:
            knobs.append(InstancesKnob(node_id, priority, tickets, self._limit))
        if knob.pinned and tickets:
            knobs.append(PaceKnob(node_id, priority, tickets, PINNED_DUTIES))
        return knobs

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> None:
        """What :meth:`open` and the first frames would reserve (:mod:`edgepipe.vision.reservations`)."""
        config = self.config
        plan_detector(plan, node, model=config.model, session=config.session_config,
                      input_size=config.input_size, batch_size=config.batch_size,
                      instances=node.instances)  # fmt: skip

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
        items = found if not self.config.may_track else self._tracks.follow(
            frame.source_id, found, frame.seq, ids=self.config.track_ids or self.frame_choice.every_used > 1
        )  # fmt: skip
        assert items is not None, "a frame the model skipped has the tracker's boxes"
        latency_ms = (time.monotonic_ns() - frame.t_decoded_ns) / 1e6
        result = Detections(
            frame.source_id, frame.seq, frame.pts, frame.time_s, frame.width, frame.height, self.model_name,
            items, inferred=run_model, latency_ms=latency_ms, infer_ms=prepared.infer_ms,
            t_decoded_ns=frame.t_decoded_ns,
        )  # fmt: skip
        if self.config.keep_frame:
            frame.retain()  # released with the detections (Detections._free)
            result.frame = frame
        return result
