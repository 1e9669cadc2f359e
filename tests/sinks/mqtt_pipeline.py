"""A test pipeline: a synthetic camera at 15 fps, a cheap fake face detector, an MQTT sink.

    edgepipe run tests/sinks/mqtt_pipeline.py --broker mqtt://127.0.0.1:1883 --device cam1

The fake detector sees one face in the first half of every second of video and none in the
second half, so the ``count`` topic changes twice a second.
"""

from __future__ import annotations

from typing import Annotated

from edgepipe import Pipeline, Range
from edgepipe.media import VideoSource
from edgepipe.media.frame import Frame
from edgepipe.sinks import MqttSink
from edgepipe.vision import Detection, Detections


def fake_faces(frame: Frame) -> Detections:
    face = [Detection((10.0, 10.0, 40.0, 50.0), 0.9, 0, "face")] if frame.seq % 16 < 8 else []
    return Detections(frame.source_id, frame.seq, frame.pts, None, frame.width, frame.height, "fake", face,
                      t_decoded_ns=frame.t_decoded_ns or 0)  # fmt: skip


def pipeline(
    broker: str = "mqtt://127.0.0.1:1883",
    device: str = "",
    outbox: Annotated[int, Range(1)] = 1000,
    fps: Annotated[int, Range(1, 60)] = 15,
    backoff_max_s: Annotated[float, Range(0.1)] = 2.0,
) -> Pipeline:
    """synthetic camera -> fake faces -> MQTT."""
    p = Pipeline("mqtt_test")
    camera = p.source("camera", VideoSource(f"synthetic://160x120@{fps}"))
    faces = p.stage("faces", fake_faces, inputs=camera, on_loop=True)  # live frames: latest, 1
    sink = MqttSink(
        broker, device or None, outbox_size=outbox, object_name="face", backoff_max_s=backoff_max_s
    )
    p.sink("mqtt", sink, inputs=faces, queue_size=16)
    return p
