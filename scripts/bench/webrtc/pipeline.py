"""The server of :mod:`.bench`: a live 720p30 camera streamed to viewers over WebRTC.

    edgepipe run scripts/bench/webrtc/pipeline.py --port 8080 --duration 60

The camera is ``synthetic://1280x720@30`` (paced like a camera: a frame every 1/30 s whether or
not anyone keeps up). One :class:`~edgepipe.serve.webrtc_stream.WebRTCStream` video of it (a
``latest`` lane of one frame: the shared encoder, once per frame however many viewers), and
its ``results`` fed by :class:`FixedBox`, a stage that makes a ``Detections`` for every frame
with one fixed box. It stands in for a detector on purpose: the benchmark measures the
streaming path (encode, packetize, send, the data channel), and a model would take the CPU
that figure is about.
"""

from __future__ import annotations

import time

from edgepipe import Pipeline
from edgepipe.media import Frame, VideoSource
from edgepipe.serve.webrtc_stream import WebRTCStream
from edgepipe.vision import Detection, Detections

SOURCE = "synthetic://1280x720@30"


class FixedBox:
    """One box in the middle of every frame (``boxes=0``: none), as a detector would report it.
    Runs on the event loop: it allocates a few small objects and returns."""

    def __init__(self, boxes: int) -> None:
        self.boxes = boxes

    async def process(self, frame: Frame) -> Detections:
        w, h = frame.width, frame.height
        items = [
            Detection(box=(w * 0.4, h * 0.4, w * 0.6, h * 0.6), score=0.9, class_id=0, label="face")
            for _ in range(self.boxes)
        ]
        return Detections(
            source_id=frame.source_id, seq=frame.seq, pts=frame.pts, time_s=frame.time_s, width=w, height=h,
            model="fixed", items=items, latency_ms=(time.monotonic_ns() - frame.t_decoded_ns) / 1e6,
            t_decoded_ns=frame.t_decoded_ns,
        )  # fmt: skip


def pipeline(source: str = SOURCE, boxes: int = 1, limit: int = 4) -> Pipeline:
    """camera -> WebRTC video; camera -> one fixed box a frame -> the viewers' ``results``."""
    if boxes < 0:
        raise ValueError(f"--boxes must be at least 0, got {boxes}")
    p = Pipeline("webrtc_bench")
    camera = p.source("camera", VideoSource(source, realtime=True))
    stream = WebRTCStream(limit=limit)
    # A synthetic camera is live: both lanes are latest with one frame (the default for it).
    p.sink("view", stream.video("camera"), inputs=camera)
    marks = p.stage("marks", FixedBox(boxes), inputs=camera)
    p.sink("view_results", stream.results, inputs=marks, queue_size=16)
    return p
