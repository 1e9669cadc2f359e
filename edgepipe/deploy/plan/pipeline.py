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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgepipe.deploy.plan.decode import CODECS, StreamSet
from edgepipe.deploy.plan.device_plan import ModelPlan, Target, memory_plan, model_plan, reserve_streams
from edgepipe.deploy.plan.model import cache_positions, read_model
from edgepipe.graph.check import Graph
from edgepipe.lm.worker import LMWorker
from edgepipe.media.decode import StreamDecoder
from edgepipe.media.errors import SourceError
from edgepipe.media.sources.video import VideoSource
from edgepipe.pipefile.loader import read_pipeline
from edgepipe.runtime.memory_plan import PlanReport, plan_graph
from edgepipe.sched.scheduler import run_budget


def load_graph(path: str, args: Sequence[str], reserved: Mapping[str, str], params_file: str | None) -> Graph:
    """The validated graph of the pipeline file with these parameters. Raises what ``edgepipe
    run`` raises for a wrong file or parameter (:class:`~edgepipe.core.errors.PipelineError`)."""
    return read_pipeline(path, reserved=reserved).call(list(args), params_file=params_file).validate()


def plan_pipeline(
    graph: Graph,
    target: Target,
    tokens_per_s: float | None,
    sequences: int,
    codec: str,
    more_streams: Sequence[StreamSet] = (),
) -> tuple[PlanReport, list[ModelPlan], list[StreamSet], list[str]]:
    """(memory plan, language models, streams, notes) of ``graph`` against ``target``;
    ``more_streams`` (``--streams``) are decoded besides the pipeline's own sources."""
    plan = memory_plan(target)
    reserve_streams(plan, more_streams)
    # Calls in flight as this machine's budget gives them (the table's devices say no cores).
    report = plan_graph(graph, plan, auto_instances=run_budget(graph).instances)
    models: list[ModelPlan] = []
    streams: list[StreamSet] = []
    notes: list[str] = []
    for spec in graph.nodes:
        worker = _worker(spec.target)
        if worker is not None:
            rate = tokens_per_s or worker.max_tokens_per_s
            facts = read_model(worker.model)
            positions = cache_positions(worker.model, worker.max_seq_len)
            models.append(model_plan(facts, spec.node_id, target, rate, positions, sequences))
        if isinstance(spec.target, VideoSource):
            stream = _stream(spec.node_id, spec.target, codec)
            if isinstance(stream, str):
                notes.append(stream)
            else:
                streams.append(stream)
    return report, models, streams, notes


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
