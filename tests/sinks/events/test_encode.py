from __future__ import annotations

import itertools

import numpy as np

from edgepipe.media.frame import Frame, from_rgb
from edgepipe.sinks.events.encode import TICKS_PER_S, ClipEncoder


def _frames(n: int, fps: int = 10, size: tuple[int, int] = (64, 48)) -> list[Frame]:
    w, h = size
    out = []
    for i in range(n):
        rgb = np.full((h, w, 3), (i * 7) % 255, np.uint8)
        frame = from_rgb(rgb, source_id="cam", seq=i)
        frame.t_decoded_ns = i * 1_000_000_000 // fps  # no media time: decode time counts
        out.append(frame)
    return out


def test_a_keyframe_at_least_every_interval_and_one_packet_a_frame() -> None:
    encoder = ClipEncoder(encoder="libx264", keyframe_interval_s=1.0)
    packets = [p for f in _frames(35) for p in encoder.encode(f)]
    assert len(packets) == 35  # zero latency: each frame's packet comes with it
    keys = [p.pts for p in packets if p.is_keyframe]
    assert keys[0] == 0
    assert all(b - a <= TICKS_PER_S for a, b in itertools.pairwise(keys))
    assert [p.pts for p in packets] == [p.dts for p in packets]  # no B-frames
    assert [p.pts for p in packets] == [i * TICKS_PER_S // 10 for i in range(35)]


def test_the_input_picture_is_reused_and_a_keyframe_comes_when_asked() -> None:
    encoder = ClipEncoder(encoder="libx264", keyframe_interval_s=10.0)
    frames = _frames(6)
    encoder.encode(frames[0])
    picture = encoder._picture
    assert not any(p.is_keyframe for f in frames[1:3] for p in encoder.encode(f))
    encoder.request_keyframe()
    assert [p.is_keyframe for p in encoder.encode(frames[3])] == [True]
    assert encoder._picture is picture


def test_another_size_reopens_the_encoder() -> None:
    encoder = ClipEncoder(encoder="libx264")
    encoder.encode(_frames(1)[0])
    packets = encoder.encode(_frames(1, size=(32, 24))[0])
    assert (encoder.size, encoder.reopened, packets[0].is_keyframe) == ((32, 24), 1, True)
