"""A video source's part of a memory plan made before anything runs (``edgepipe run --plan``).

The frame pool's bytes depend on the frame size, which the first decoded frame tells at run
time. Before that: a synthetic URL states it; any other input is opened briefly, in software,
under the source's own deadline, and its stream's declared size read (nothing is decoded).
"""

from __future__ import annotations

from edgepipe.media.decode import StreamDecoder
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import FrameSize, frame_pool_size
from edgepipe.media.url import SourceURL
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanNode
from edgepipe.wire.redact import redact_url


def pool_capacity(pool_size: int | None, consumer_holds: tuple[int, ...]) -> int:
    """Frames a source's pool holds: ``pool_size`` when given, else what its consumers can
    hold at once (2 when it has none, as outside a pipeline) plus the one being decoded."""
    return pool_size or (sum(consumer_holds) or 2) + 1


def probe_frame_size(
    src: SourceURL, *, timeout_s: float, rtsp_transport: str = "tcp", options: dict[str, str] | None = None
) -> FrameSize | None:
    """The frame size ``src`` declares (None when its stream says none before decoding).
    Blocks (the open is bounded by ``timeout_s``); raises :class:`SourceError` when it cannot be
    opened."""
    if src.kind == "synthetic":
        return FrameSize(src.width, src.height)
    decoder = StreamDecoder(src, timeout_s=timeout_s, rtsp_transport=rtsp_transport, options=options)
    decoder.open()
    try:
        ctx = decoder.stream.codec_context
        width, height = int(ctx.width or 0), int(ctx.height or 0)
    finally:
        decoder.close()
    return FrameSize(width, height) if width > 0 and height > 0 else None


def plan_frame_pool(
    plan: MemoryPlan,
    node: PlanNode,
    src: SourceURL,
    *,
    pool_size: int | None,
    timeout_s: float,
    rtsp_transport: str = "tcp",
    options: dict[str, str] | None = None,
) -> FrameSize | None:
    """Reserve the pool a :class:`~edgepipe.media.VideoSource` would fill (see
    :meth:`~edgepipe.media.FramePool.plan`); its frame size, or None when it cannot be known."""
    capacity = pool_capacity(pool_size, node.consumer_holds)
    what = f"frame pool ({capacity} frames)"
    try:
        size = probe_frame_size(src, timeout_s=timeout_s, rtsp_transport=rtsp_transport, options=options)
    except SourceError as exc:
        shown = redact_url(src.url)  # as the error's own text shows it
        reason = str(exc).removeprefix(f"{shown}: ").removeprefix("cannot open: ")
        node.unknown(what, f"cannot open {shown}: {reason}")
        return None
    if size is None:
        node.unknown(what, f"{redact_url(src.url)} declares no frame size before decoding")
        return None
    what, nbytes = frame_pool_size(capacity, size.width, size.height)
    plan.reserve(node.node_id, what, nbytes, hint="lower the resolution or the consumers' queue sizes")
    return size
