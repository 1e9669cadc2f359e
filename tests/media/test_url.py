from __future__ import annotations

import pytest

from edgepipe.media.url import parse


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("rtsp://user:pw@cam.local/stream1", ("cam.local", 554)),
        ("rtsp://10.0.0.5:8554/cam", ("10.0.0.5", 8554)),
        ("rtsps://cam/x", ("cam", 322)),
        ("http://[::1]/clip.mp4", ("::1", 80)),
        ("https://cdn/live.m3u8", ("cdn", 443)),
        ("rtmp://server/live/key", ("server", 1935)),
        ("tcp://127.0.0.1:9000", ("127.0.0.1", 9000)),
        ("udp://239.0.0.1:5000", None),  # no TCP server to ask
        ("srt://host:9000", None),
        ("clip.mp4", None),
        ("/dev/video0", None),
        ("synthetic://64x48@5", None),
        ("rtsp://cam:notaport/x", None),  # the open says what is wrong
    ],
)
def test_the_tcp_address_knocked_on_while_a_source_waits_to_reopen(
    url: str, address: tuple[str, int] | None
) -> None:
    assert parse(url).tcp_address() == address
