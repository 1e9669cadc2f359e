"""A pipeline file's models and streams in a capacity plan (``edgepipe plan FILE [PARAMS]``).

The file is loaded and its parameters read as ``edgepipe run`` does
(:func:`~edgepipe.pipefile.loader.read_pipeline`); its graph is planned by
:func:`~edgepipe.runtime.memory_plan.plan_graph`, the code behind ``edgepipe run FILE --plan``, against
the device's RAM. Its language models (a node holding an :class:`~edgepipe.lm.LMWorker`, as
:class:`~edgepipe.lm.Describe` does) get the bandwidth sums; its video sources the decode sums,
at the size and rate the input declares (a synthetic camera is planned as a camera sending
``codec``, the size and rate it states).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepipe.deploy.plan.decode import (
    CODECS,
    DEFAULT_CODEC,
    DEFAULT_FPS,
    DEFAULT_HEIGHT,
    DEFAULT_WIDTH,
    StreamSet,
)
from edgepipe.deploy.plan.device_plan import ModelPlan, Target, memory_plan, model_plan
from edgepipe.deploy.plan.model import cache_positions, read_model
from edgepipe.graph.check import Graph
from edgepipe.lm.worker import LMWorker
from edgepipe.media.decode import StreamDecoder
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import frame_pool_size
from edgepipe.media.reservations import pool_capacity
from edgepipe.media.sources.video import VideoSource
from edgepipe.pipefile.loader import read_pipeline
from edgepipe.runtime.memory_plan import PlanReport, plan_graph
from edgepipe.sched.scheduler import run_budget


def load_graph(path: str, args: Sequence[str], reserved: Mapping[str, str], params_file: str | None) -> Graph:
    """The validated graph of the pipeline file with these parameters. Raises what ``edgepipe
    run`` raises for a wrong file or parameter (:class:`~edgepipe.core.errors.PipelineError`)."""
    return read_pipeline(path, reserved=reserved).call(list(args), params_file=params_file).validate()


@dataclass(frozen=True)
class StreamsWanted:
    """``--streams N`` and what the command line says of those streams (None: as the pipeline's
    first video source has it; 1920x1080, 30 fps, h264 where it has none that can be read)."""

    count: int
    """How many streams (cameras) the pipeline is planned with."""
    width: int | None = None
    """Of each stream, in pixels (``--resolution``)."""
    height: int | None = None
    """Of each stream, in pixels (``--resolution``)."""
    fps: float | None = None
    """Frames per second of each stream (``--fps``)."""
    codec: str | None = None
    """The table's codec name (``h264``, ``h265`` …: ``--codec``)."""

    def streams(self, like: StreamSet | None, replaced: str = "") -> StreamSet:
        """The ``count`` streams, each like ``like`` where the command line does not say;
        ``replaced`` names the pipeline's sources they stand for."""
        width = self.width or (like.width if like else DEFAULT_WIDTH)
        height = self.height or (like.height if like else DEFAULT_HEIGHT)
        fps = self.fps or (like.fps if like else DEFAULT_FPS)
        codec = self.codec or (like.codec if like else DEFAULT_CODEC)
        origin = f"--streams {self.count} in place of {replaced}" if replaced else ""
        return StreamSet(self.count, width, height, fps, codec, origin=origin)


def plan_pipeline(
    graph: Graph,
    target: Target,
    tokens_per_s: float | None,
    sequences: int,
    codec: str,
    wanted: StreamsWanted | None = None,
) -> tuple[PlanReport, list[ModelPlan], list[StreamSet], list[str]]:
    """(memory plan, language models, streams, notes) of ``graph`` against ``target``.

    ``wanted`` (``--streams N``) stands for the pipeline's own video sources: the decode sums are
    of N streams, and the memory plan holds, for each stream past the sources the pipeline has,
    a frame pool as its first source's (the question is "this pipeline with N cameras", not "N
    more")."""
    found: dict[str, StreamSet] = {}
    notes: list[str] = []
    for spec in graph.nodes:
        if isinstance(spec.target, VideoSource):
            stream = _stream(spec.node_id, spec.target, codec)
            if isinstance(stream, str):
                notes.append(stream)
            else:
                found[spec.node_id] = stream
    plan = memory_plan(target)
    # Calls in flight as this machine's budget gives them (the table's devices say no cores).
    report = plan_graph(graph, plan, auto_instances=run_budget(graph).instances)
    streams = list(found.values())
    if wanted is not None:
        first = next(iter(found), None)
        streams = [wanted.streams(found[first] if first else None, ", ".join(found) or "")]
        more = wanted.count - len(found)
        if more > 0:
            capacity = _pool_capacity(report, first)
            what, nbytes = frame_pool_size(capacity, streams[0].width, streams[0].height)
            plan.reserve("--streams", f"{more} more x {what}", nbytes * more)
            report = dataclasses.replace(
                report, entries=tuple(sorted(plan.entries(), key=lambda r: r.key)), refusal=plan.first_refusal
            )
        elif more < 0:
            notes.append(
                f"--streams {wanted.count}: the decode sums are of {wanted.count} stream(s); the memory "
                f"plan keeps the frame pools of the pipeline's {len(found)} sources"
            )
    models: list[ModelPlan] = []
    for spec in graph.nodes:
        worker = _worker(spec.target)
        if worker is not None:
            rate = tokens_per_s or worker.max_tokens_per_s
            facts = read_model(worker.model)
            positions = cache_positions(worker.model, worker.max_seq_len)
            models.append(model_plan(facts, spec.node_id, target, rate, positions, sequences))
    return report, models, streams, notes


def _pool_capacity(report: PlanReport, source: str | None) -> int:
    """Frames in the pool ``source`` reserved (a source outside a pipeline's when none did)."""
    for r in report.entries:
        found = re.match(r"frame pool \((\d+) x ", r.what)
        if r.owner == source and found:
            return int(found.group(1))
    return pool_capacity(None, (1,))


def _worker(target: Any) -> LMWorker | None:
    if isinstance(target, LMWorker):
        return target
    worker = getattr(target, "worker", None)
    return worker if isinstance(worker, LMWorker) else None


def _stream(node_id: str, source: VideoSource, codec: str) -> StreamSet | str:
    """The stream ``source`` would decode, or a line saying why it cannot be known."""
    src = source.src
    if src.kind == "synthetic":
        return StreamSet(
            1, src.width, src.height, src.fps, codec, origin=f"{node_id} (synthetic, as {codec})"
        )
    decoder = StreamDecoder(
        src, timeout_s=source.timeout_s, rtsp_transport=source.rtsp_transport, options=source.options
    )
    try:
        decoder.open()
    except SourceError as exc:
        return f"{node_id}: cannot open its input to read the stream: {exc}"
    try:
        ctx = decoder.stream.codec_context
        rate = decoder.stream.average_rate or decoder.stream.guessed_rate
        width, height, name = int(ctx.width or 0), int(ctx.height or 0), str(ctx.name)
    finally:
        decoder.close()
    if not (width and height and rate):
        return f"{node_id}: its stream declares no size or frame rate before decoding"
    return StreamSet(
        1, width, height, float(rate), CODECS.get(name, name), origin=f"{node_id} ({Path(src.url).name})"
    )
