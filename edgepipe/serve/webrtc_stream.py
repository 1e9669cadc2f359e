"""What a pipeline shows its viewers: :class:`WebRTCStream`, one video per source (encoded once
per codec whatever the number of viewers: H.264, and VP8 only while a viewer without H.264
watches) and the results on each viewer's ``results`` data channel::

    stream = WebRTCStream()
    p.sink("view", stream.video("camera"), inputs=pixelated, policy="latest", queue_size=1)
    p.sink("view_results", stream.results, inputs=faces, queue_size=16)

(``results`` runs on the event loop, where the viewers' channels are: it says so itself.)

What a track shows is the pipeline's choice: ``face_privacy`` feeds ``video`` from the pixelated
branch only. ``edgepipe run FILE --port N`` finds the stream among the graph's nodes and answers
viewers' offers (``POST /offer``, WHEP ``POST /whep``) with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgepipe.core.errors import PipelineError
from edgepipe.graph.check import Graph
from edgepipe.graph.spec import on_loop
from edgepipe.serve.encoder import SharedEncoder, WebRTCOut

if TYPE_CHECKING:
    from edgepipe.serve.webrtc import Viewers


class WebRTCStream:
    """The viewers of one pipeline and the encoders they watch (see the module docstring)."""

    def __init__(self, *, limit: int = 4) -> None:
        """``limit``: viewers at once; one more is answered 503."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.limit = limit
        self.encoders: dict[str, SharedEncoder] = {}
        """H.264, by source."""
        self.fallback: dict[str, SharedEncoder] = {}
        """VP8, by source (for viewers that offer no H.264)."""
        self._viewers: Viewers | None = None

    @property
    def viewers(self) -> Viewers:
        """The viewers, made when the server first asks: a pipeline run without ``--port``
        never imports aiortc (nor encodes anything: encoders without subscribers are idle)."""
        if self._viewers is None:
            from edgepipe.serve.webrtc import Viewers

            viewers = Viewers(limit=self.limit)
            viewers.encoders, viewers.fallback = self.encoders, self.fallback  # the same maps
            self._viewers = viewers
        return self._viewers

    def video(self, source_id: str, **encoder: Any) -> WebRTCOut:
        """A sink encoding ``source_id``'s frames for every viewer (``encoder``: options of
        :class:`~edgepipe.serve.encoder.SharedEncoder`)."""
        if source_id in self.encoders:
            raise ValueError(f"the stream already has a video named {source_id!r}")
        shared = SharedEncoder(source_id, **encoder)
        fallback = SharedEncoder(source_id, **{**encoder, "codec": "libvpx"})
        self.encoders[source_id] = shared
        self.fallback[source_id] = fallback
        out = WebRTCOut(shared, fallback)
        out.stream = self
        return out

    @on_loop
    def results(self, item: Any) -> None:
        """A sink sending results (:class:`~edgepipe.vision.Detections`, an LM's ``token`` and
        ``event`` messages: any result, see :mod:`edgepipe.wire.messages`) to every viewer;
        never blocks (a viewer whose channel is full loses messages, nobody waits)."""
        viewers = self._viewers
        if viewers is not None:  # no server asked: nobody can be watching
            viewers.publish(item)


def streams_of(graph: Graph) -> list[WebRTCStream]:
    """The stream a pipeline's nodes feed (through :meth:`WebRTCStream.video` sinks), if any.
    Raises :class:`~edgepipe.core.errors.PipelineError` for more than one: viewers are answered
    with one, and the others would be silently unseen."""
    found: dict[int, WebRTCStream] = {}
    for node in graph.nodes:
        stream = getattr(node.target, "stream", None)
        if isinstance(stream, WebRTCStream):
            found[id(stream)] = stream
    if len(found) > 1:
        raise PipelineError(
            f"pipeline {graph.name!r} feeds {len(found)} WebRTCStream objects; use one for every "
            "source (stream.video(source) for each)"
        )
    return list(found.values())
