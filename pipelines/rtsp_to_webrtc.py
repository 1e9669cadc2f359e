"""Any source to the browser: a camera (synthetic by default), an RTSP stream, a file or
/dev/video0 streamed over WebRTC, with the detector's boxes on the data channel if you want them.

    edgepipe run pipelines/rtsp_to_webrtc.py --port 8080      # then open http://127.0.0.1:8080/
    edgepipe run pipelines/rtsp_to_webrtc.py --detect centerface --threshold 0.4 --port 8080
    edgepipe run pipelines/rtsp_to_webrtc.py --source rtsp://192.0.2.10/stream --port 8080
    edgepipe run pipelines/rtsp_to_webrtc.py --source clip.mp4 --repeat --detect centerface --port 8080
    edgepipe run pipelines/rtsp_to_webrtc.py --source /dev/video0 --detect centerface --every 2 --port 8080

The video is the camera's own picture, encoded once (H.264) whatever the number of viewers (4 at
most), and nothing at all while nobody watches. ``--detect`` takes a model name (``centerface``)
or an .onnx path; the detector reads the camera through a ``latest`` queue of one on its own
branch, so a slow model skips frames and never delays the video, and every analysed frame's
boxes (empty ones too, so a viewer clears its overlay) go to each viewer's ``results`` data
channel, stamped with the frame's pts. With ``--every N`` the model runs on one frame in N and a
tracker carries the boxes between. A file plays at its own frame rate, as a camera would
(``--repeat`` plays it again and again). It needs the runtime dependencies only.
"""

from __future__ import annotations

from typing import Annotated

from edgepipe import Detector, Pipeline, Range, VideoSource, WebRTCStream
from edgepipe.media import SYNTHETIC_DEFAULT


def pipeline(
    source: str = SYNTHETIC_DEFAULT,
    detect: str = "none",
    every: Annotated[int, Range(1)] = 3,
    threshold: Annotated[float, Range(0, 1)] = 0.5,
    repeat: bool = False,
    viewers: Annotated[int, Range(1)] = 4,
    decoder: str = "auto",
) -> Pipeline:
    """camera -> viewers (video); with --detect MODEL, camera -> detector -> viewers (results).

    Args:
        source: the camera: rtsp://..., http://..., a video file, /dev/video0, or
            synthetic://WxH@FPS (a generated test picture).
        detect: a detector whose boxes go to the viewers: a model name (`edgepipe models
            list`), an .onnx path, or none.
        every: run the detector on one frame in this many; a tracker carries the boxes
            between.
        threshold: the score a detection needs to be sent.
        repeat: play a file source again from the start each time it ends.
        viewers: how many viewers may watch at once.
        decoder: the video decoder: auto (hardware when one works), software, or a name
            from `edgepipe probe`.
    """
    p = Pipeline("rtsp_to_webrtc")
    camera = p.source("camera", VideoSource(source, decoder=decoder, realtime=True, loop=repeat))
    stream = WebRTCStream(limit=viewers)
    # A viewer wants the newest picture: the encoder takes the latest frame and holds no other.
    p.sink("view", stream.video("camera"), inputs=camera, policy="latest", queue_size=1)
    if detect != "none":
        boxes = p.stage("detect", Detector(detect, score_threshold=threshold, every=every), inputs=camera,
                        policy="latest", queue_size=1, timeout_s=5.0)  # fmt: skip
        p.sink("view_results", stream.results, inputs=boxes, queue_size=16)
    return p
